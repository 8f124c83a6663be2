// Package idle holds `make bench-idle` (idle_bench_test.go, build tag bench): what a warm warmd costs
// a node and its API server while nothing changes. Its only test outside that benchmark is
// audit_test.go's TestHeartbeatClassification, the rule the benchmark counts writes by, which `make test`
// runs untagged.
package idle

// Package idle holds `make bench-idle` (idle_bench_test.go, build tag bench): what a warm warmd costs
// a node and its API server while nothing changes. It has no code outside that benchmark.
package idle

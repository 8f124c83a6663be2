#!/usr/bin/env bash
# idle.sh is `make bench-idle`: what a warm warmd costs while nothing changes, the node's steady state
# for days. Three small models (each with its own image, weights in S3, compile caches on) become warm
# on a node whose GPU is the recorded H100, with readiness publishing to a real kube-apiserver
# (envtest's, from KUBEBUILDER_ASSETS); then IDLE seconds (default 600) pass with nothing changing
# (test/idle, TestBenchIdle).
#
# What is measured, and why it is fair: warmd's CPU seconds over the idle window (utime+stime from
# /proc/<pid>/stat, a delta, so start-up and warm-up are not charged), its peak RSS (VmHWM: the whole
# run's peak, warm-up included, which is what a memory limit must allow), and the API requests it
# made, counted by the API server itself: an audit policy records warmd's user only (Metadata level,
# writes at Request level), so the count does not rely on warmd's own counters. A write whose body
# differs from the previous write to the same object only in lastHeartbeatTime is the WarmdReady
# heartbeat (readiness: every 5m, checked every 75s): up to ceil(IDLE/300) of them are expected, and
# every other write is listed in the log. The goals: < 1% of one core, < 64 MiB, no write beyond the
# heartbeat. The machine is shared, so CPU figures can be noisy upwards, never downwards.
# Runs under scripts/with-testenv.sh (S3, containerd binaries, KUBEBUILDER_ASSETS).
# Last line: idle: cpu_pct <P>, rss_mib <R>, api_writes <N> over <S>s
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${KUBEBUILDER_ASSETS:?run through scripts/with-testenv.sh (make bench-idle) or source testenv.env}"
: "${WARMD_TEST_S3:?run through scripts/with-testenv.sh (make bench-idle) or source testenv.env}"
export GOFLAGS=-buildvcs=false
IDLE=${IDLE:-600}
export IDLE
# The binary make bench-idle built; without it the test builds warmd from this checkout itself.
if [ -x bin/warmd ]; then export WARMD_BIN=${WARMD_BIN:-$PWD/bin/warmd}; fi
log=$(mktemp "${TMPDIR:-/tmp}/warmd-bench-idle.XXXXXX")
trap 'rm -f "$log"' EXIT
go test -tags bench -count=1 -timeout "$((IDLE + 1200))s" -run '^TestBenchIdle$' -v ./test/idle/ >"$log" 2>&1 || {
	cat "$log"
	exit 1
}
grep -E '^\s+idle_bench_test.go' "$log" | sed 's/^\s*//' || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
grep -E '^idle: cpu_pct [0-9.]+, rss_mib [0-9]+, api_writes [0-9]+ over [0-9]+s$' "$log" | tail -1

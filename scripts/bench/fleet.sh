#!/usr/bin/env bash
# fleet.sh is `make bench-fleet`: one model (MODEL_BYTES, default 512 MiB in SHARDS files, default 16)
# to NODES `warmd run` processes (default 8) on one kube-apiserver and one versitygw origin behind the
# fault proxy, every node a machine of its own on the network: its own network namespace with a veth
# pair to a bridge and a link capped each way by tc at LINK_MIB MiB/s (default 25), the origin behind a
# link of one node's rate, the API server behind an unshaped relay (internal/testenv/links). First one
# node alone checks the shaping (it must read at no more than 1.1x its link); then ROUNDS rounds
# (default 2) time the fleet with and without peers, in rotated order (odd rounds without peers
# first); the line gives the medians (test/fleet, TestFleetWarmsFromPeers with WARMD_FLEET_BENCH=1).
# PART_MIB > 0 stores the shards as multipart uploads of PART_MIB parts (8 is the AWS CLI's
# multipart_chunksize) with CRC32C part checksums, as on S3 where nodes serve each part once it
# matches; but versitygw 1.8, the origin here, answers GetObjectAttributes and HEAD ?partNumber=N
# without part checksums, so its parts cannot be checked one by one and the files stay file-level:
# the default 0 stores plain objects (served file by file), which is what this origin can show.
# Why it is fair: both arms move the same model over the same links to the same nodes, and what is
# timed is what a user waits for, from the first process start to the last node's weights verified.
# Without peers the origin's one link is shared by every node (the case peers exist for); the speedup
# can be at most about NODES. The nodes still share this machine's CPUs and disk: LINK_MIB is low
# enough that 8 links' traffic leaves the CPUs headroom (the log's load average says so).
# Needs root (namespaces, veth, tc). Last line:
# fleet: nodes <N>, origin_bytes_ratio <R>, all_warm <T>s, without_peers <U>s, speedup <U/T>, links <L> MiB/s
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
MODEL_BYTES=${MODEL_BYTES:-$((512 << 20))}
SHARDS=${SHARDS:-16}
NODES=${NODES:-8}
LINK_MIB=${LINK_MIB:-25}
ROUNDS=${ROUNDS:-2}
PART_MIB=${PART_MIB:-0}
need_kb=$(((MODEL_BYTES * (2 * NODES + 2)) / 1024))
avail=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR==2 {print $4}')
if [ "$avail" -lt "$need_kb" ]; then
  echo "bench-fleet: need $((need_kb >> 20)) GiB free under ${TMPDIR:-/tmp}; have $((avail >> 20)) GiB" >&2
  exit 1
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
WARMD_FLEET_BENCH=1 WARMD_FLEET_NODES=$NODES WARMD_FLEET_MODEL_BYTES=$MODEL_BYTES WARMD_FLEET_SHARDS=$SHARDS \
  WARMD_FLEET_LINK_RATE=$((LINK_MIB << 20)) WARMD_FLEET_ROUNDS=$ROUNDS \
  WARMD_FLEET_PART_BYTES=$((PART_MIB << 20)) \
  go test -count=1 -timeout 120m -v -run TestFleetWarmsFromPeers ./test/fleet/ 2>&1 | grep -v '^[IW][0-9]' | tee "$out" >&2
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
grep '^fleet: ' "$out" | tail -1

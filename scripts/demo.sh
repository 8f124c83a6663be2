#!/usr/bin/env bash
# demo.sh is `make demo`: warmd's main job on its embedded defaults, on this machine alone.
# It starts a local S3 server (versitygw) and registry (docker-registry) on loopback, writes a NodeConfig
# pointing at them, runs `warmd run` in the background with the embedded image backend and the null GPU,
# shows `warmd status`, and stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Building the local services (cached after the first run)"
bin=$(scripts/testbin.sh debian versitygw | tail -1)

demo=$(mktemp -d /tmp/warmd-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$demo"
}
trap cleanup EXIT
port() { local p; while :; do p=$((20000 + RANDOM % 40000)); (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }; done; }
waitport() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "nothing listens on $1" >&2; return 1; }

step "Starting S3 (versitygw) and a registry on 127.0.0.1"
s3port=$(port)
mkdir -p "$demo/s3/models"
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo-secret-key
ROOT_ACCESS_KEY=$AWS_ACCESS_KEY_ID ROOT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY "$bin/versitygw" --port "127.0.0.1:$s3port" --quiet posix "$demo/s3" >"$demo/versitygw.log" 2>&1 &
pids+=($!)
regport=$(port)
printf 'version: 0.1\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:%s}\nlog: {level: warn}\n' "$demo/registry" "$regport" >"$demo/registry.yml"
/usr/bin/docker-registry serve "$demo/registry.yml" >"$demo/registry.log" 2>&1 &
pids+=($!)
waitport "$s3port"
waitport "$regport"
echo "S3 at http://127.0.0.1:$s3port, registry at 127.0.0.1:$regport"

step "Writing a NodeConfig ($demo/config.yaml)"
cat >"$demo/config.yaml" <<YAML
apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: demo-node
dataDir: $demo/data
containerd:
  backend: embedded
s3:
  endpoint: http://127.0.0.1:$s3port
models:
- name: demo/tiny-model
  source: s3://models/tiny-model/
api:
  listen: 127.0.0.1:$(port)
readiness:
  disabled: true
phases:
  podLogDir: $demo/pods
YAML
cat "$demo/config.yaml"

step "Running warmd run in the background (logs: $demo/warmd.log)"
bin/warmd run --config "$demo/config.yaml" --log-format text >"$demo/warmd.log" 2>&1 &
wpid=$!
pids+=("$wpid")
for _ in $(seq 100); do [ -S "$demo/data/warmd.sock" ] && break; sleep 0.1; done

step "warmd status"
bin/warmd status --data-dir "$demo/data"

step "Stopping warmd (SIGTERM) and the services"
kill -TERM "$wpid"
wait "$wpid" && echo "warmd stopped cleanly (exit 0)"

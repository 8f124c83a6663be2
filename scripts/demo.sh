#!/usr/bin/env bash
# demo.sh is `make demo`: warmd's main job, on this machine alone, in a few minutes.
# It starts a local S3 server (versitygw) and registry (docker-registry) on loopback, uploads a small
# generated model and pushes a small image, writes a NodeConfig, runs `warmd run` with the embedded
# image backend (no containerd needed) and the null GPU, watches `warmd status` until the node is warm,
# replays a vLLM startup log through `warmd phases` (table + SVG), shows where everything landed, and
# cleans up. KEEP=1 keeps the demo dir.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
say() { printf '    %s\n' "$*"; }
start=$(date +%s)

step "1. Building the local services (cached after the first run) and the demo fixtures tool"
bin=$(scripts/testbin.sh debian versitygw | tail -1)
demo=$(mktemp -d /tmp/warmd-demo-XXXXXX)
go build -o "$demo/demo-fixtures" ./hack/demo-fixtures
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-}" = 1 ]; then echo "kept $demo"; else rm -rf "$demo"; fi
}
trap cleanup EXIT
port() { local p; while :; do p=$((20000 + RANDOM % 40000)); (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }; done; }
waitport() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "nothing listens on $1" >&2; return 1; }

step "2. Starting S3 (versitygw) and a registry, both on 127.0.0.1"
s3port=$(port)
mkdir -p "$demo/s3"
export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo-secret-key
ROOT_ACCESS_KEY=$AWS_ACCESS_KEY_ID ROOT_SECRET_KEY=$AWS_SECRET_ACCESS_KEY "$bin/versitygw" --port "127.0.0.1:$s3port" --keep-alive --quiet posix "$demo/s3" >"$demo/versitygw.log" 2>&1 &
pids+=($!)
regport=$(port)
printf 'version: 0.1\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: 127.0.0.1:%s}\nlog: {level: warn}\n' "$demo/registry" "$regport" >"$demo/registry.yml"
/usr/bin/docker-registry serve "$demo/registry.yml" >"$demo/registry.log" 2>&1 &
pids+=($!)
waitport "$s3port"
waitport "$regport"
say "S3 at http://127.0.0.1:$s3port (credentials from the AWS environment variables, as on a node)"
say "registry at 127.0.0.1:$regport"

step "3. Uploading a small model to S3 and pushing a small vLLM-stand-in image"
image=127.0.0.1:$regport/demo/vllm-openai:v0.10.2
"$demo/demo-fixtures" --s3 "http://127.0.0.1:$s3port" --bucket models --prefix tiny-model/ --image "$image"

step "4. Writing a NodeConfig ($demo/config.yaml)"
cat >"$demo/config.yaml" <<YAML
apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: demo-node
dataDir: $demo/data
containerd:
  backend: embedded        # no containerd daemon here: a content store under the data dir
s3:
  endpoint: http://127.0.0.1:$s3port
models:
- name: demo/tiny-model
  source: s3://models/tiny-model/
  image: $image
weights:
  bandwidthLimit: 16Mi     # cap prefetch so it never starves serving traffic (and so you can watch it)
api:
  listen: 127.0.0.1:$(port)
readiness:
  disabled: true           # no API server here: warm state is evaluated and shown, not published
phases:
  podLogDir: $demo/pods
YAML
sed 's/^/    /' "$demo/config.yaml"

mkdir -p "$demo/pods"   # stands in for the kubelet's /var/log/pods

step "5. Running warmd run in the background (logs: $demo/warmd.log)"
bin/warmd run --config "$demo/config.yaml" --log-format text >"$demo/warmd.log" 2>&1 &
wpid=$!
pids+=("$wpid")
for _ in $(seq 100); do [ -S "$demo/data/warmd.sock" ] && break; sleep 0.1; done

step "6. warmd status --watch --until-warm: image pull, weights download and verification, until warm"
timeout 120 bin/warmd status --data-dir "$demo/data" --watch --until-warm --interval 1s
say "the node is warm; warmd status --check agrees:"
bin/warmd status --data-dir "$demo/data" --check >/dev/null && say "exit 0 (warm)"

step "7. warmd phases: a vLLM 7B cold start and a warm one (compile caches kept), side by side"
bin/warmd phases pkg/phases/testdata/seed-7b-cold.log pkg/phases/testdata/seed-7b-warm.log
bin/warmd phases -o svg pkg/phases/testdata/seed-7b-cold.log >"$demo/seed-7b-cold.svg"
say "waterfall chart: $demo/seed-7b-cold.svg (open it in a browser; KEEP=1 keeps it)"

step "8. Where everything landed"
snap=$(bin/warmd status --data-dir "$demo/data" -o json | sed -n 's/.*"snapshotPath": "\(.*\)".*/\1/p' | head -1)
say "weights, in the Hugging Face cache layout (HF_HUB_CACHE=$demo/data/weights, --model demo/tiny-model):"
(cd "$demo/data/weights" && find models--demo--tiny-model -maxdepth 3 | sort | sed 's/^/      /')
say "snapshot to pass as vLLM --model: $snap"
say "sha256 of the shards on disk and in S3 (they match):"
for f in "$snap"/*.safetensors; do
  printf '      %s  %s\n' "$(sha256sum <"$f" | cut -c1-16)" "$(basename "$f")"
  printf '      %s  s3://models/tiny-model/%s\n' "$(sha256sum <"$demo/s3/models/tiny-model/$(basename "$f")" | cut -c1-16)" "$(basename "$f")"
done
say "image content store (embedded backend): $demo/data/images"
say "node state for machines: bin/warmd status -o json (the readiness section is what a Node would carry)"

step "9. Stopping warmd (SIGTERM) and the services"
kill -TERM "$wpid"
wait "$wpid" && say "warmd stopped cleanly (exit 0)"
say "demo finished in $(( $(date +%s) - start ))s"

#!/usr/bin/env bash
# node.sh is `make bench-node`: how long a fresh node takes to become warm, with everything a vLLM
# node needs at once (the image pulled, unpacked and pinned; 4 GiB of weights verified in the HF
# layout; a 1 GiB compile-cache bundle for the node's GPU SKU restored), against each of those legs
# alone, measured in the same rounds on the same services.
#
# What is compared: `warmd run` with one model that has all three legs (image + weights + compile
# cache, the node warm when `warmd status -o json` says readiness.warm and each leg's section says it
# is done) against three `warmd run`s each configured with only one leg (only `images:`; only a model
# without an image and compile caches off; only `compileCache.remote`), each done when its own
# section says so. The goal is that the legs overlap: the whole takes at most 1.15 x the slowest leg.
#
# Why it is fair: every run starts from an empty data dir and a containerd without the image (every
# ref removed, then a synchronous GC of content and snapshots, checked), with `sync` before it; the
# clock starts when `warmd run` is started and stops at the first status poll (every POLL seconds)
# that shows the goal, so daemon start-up and the poll granularity are charged to every run alike.
# The four runs of a round rotate their order each round (so page-cache and disk drift hit all
# alike), ROUNDS >= 3, medians are reported. The registry's and S3's source files stay in the page
# cache for all runs alike (dropping the machine's caches is not ours to do on a shared machine).
# The node's GPU is the recorded H100 inventory the e2e tests replay (nvml.EnvRecordedInventory), so
# the compile-cache bundle is for that SKU, pushed once with `warmd cache push` from a generated tree
# (pkg/cache/cachetest Node spec, ~10,000 files), as a first node of the SKU would have.
#
# The image comes from hack/imagegen with IMAGEGEN_ARGS (default `--mode realistic`: the vLLM-shaped
# image bench-images pulls, 13 gzip layers, ~3.2 GiB compressed, ~6.5 GiB uncompressed; for a quick
# run e.g. `--layers 8 --layer-size 536870912`, 4 GiB of incompressible uncompressed layers). Sizes: WEIGHTS_SHARDS x WEIGHTS_SHARD bytes of
# weights (default 4 x 1 GiB), CACHE_SPEC (node, or small for a quick run).
# Runs under scripts/with-testenv.sh (WARMD_TEST_CONTAINERD, WARMD_TEST_REGISTRY, WARMD_TEST_S3*).
# Last line: node: warm <T>s, legs image <I>s weights <W>s cache <C>s, overlap <T/max>, daemon_warm <D>s
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
ROUNDS=${ROUNDS:-3}
POLL=${POLL:-0.25}
IMAGEGEN_ARGS=${IMAGEGEN_ARGS:---mode realistic}
WEIGHTS_SHARDS=${WEIGHTS_SHARDS:-4}
WEIGHTS_SHARD=${WEIGHTS_SHARD:-$((1 << 30))}
CACHE_SPEC=${CACHE_SPEC:-node}
TIMEOUT=${TIMEOUT:-1800} # seconds one run may take before the bench gives up
: "${WARMD_TEST_CONTAINERD:?run through scripts/with-testenv.sh (make bench-node)}"
: "${WARMD_TEST_REGISTRY:?run through scripts/with-testenv.sh (make bench-node)}"
: "${WARMD_TEST_S3:?run through scripts/with-testenv.sh (make bench-node)}"
: "${WARMD_TEST_S3_ROOT:?run through scripts/with-testenv.sh (make bench-node)}"
: "${KUBEBUILDER_ASSETS:?run through scripts/with-testenv.sh (make bench-node)}"
log() { echo "bench-node: $*" >&2; }
[ "$ROUNDS" -ge 3 ] || { log "ROUNDS must be >= 3"; exit 2; }

sock=$WARMD_TEST_CONTAINERD
ctr="$KUBEBUILDER_ASSETS/ctr --address $sock -n k8s.io"
inventory=$PWD/pkg/nvml/testdata/recorded-h100x8.json
sku=$(jq -r .inventory.sku "$inventory")
model=bench/node-model
bucket=node-bench-$$
work=$(mktemp -d "${TMPDIR:-/tmp}/node-bench-XXXXXX")
wpid=
cleanup() {
  if [ -n "$wpid" ]; then kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true; fi
  rm -rf "$work" "${WARMD_TEST_S3_ROOT:?}/$bucket"
}
trap cleanup EXIT

weights_bytes=$((WEIGHTS_SHARDS * WEIGHTS_SHARD))
need_kb=$(((2 * weights_bytes + (16 << 30)) / 1024)) # + the image: registry, content store, snapshots
avail=$(df -Pk "$work" | awk 'NR==2 {print $4}')
log "$(df -h "$work" | awk 'NR==2 {print $6": "$4" free"}'); load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
if [ "$avail" -lt "$need_kb" ]; then
  log "need $((need_kb >> 20)) GiB free under $work; have $((avail >> 20)) GiB"; exit 1
fi

# --- tools ---
warmd=${WARMD_BIN:-$PWD/bin/warmd} # make bench-node builds bin/warmd first
[ -x "$warmd" ] || CGO_ENABLED=1 go build -o "$warmd" ./cmd/warmd
go build -o "$work/imagegen" ./hack/imagegen
go build -o "$work/cachegen" ./pkg/cache/cachetest/gen

# --- the image ---
ref=$WARMD_TEST_REGISTRY/warmd-bench/node:v1
log "pushing the image: imagegen $IMAGEGEN_ARGS"
# shellcheck disable=SC2086 # IMAGEGEN_ARGS is a list of flags
digest=$("$work/imagegen" --ref "$ref" $IMAGEGEN_ARGS | tail -1)
log "image $ref $digest"

# --- the weights: incompressible (AES-CTR keystream), placed as files in the bucket dir ---
src=$WARMD_TEST_S3_ROOT/$bucket
mkdir -p "$src/model" "$src/cache"
gen() { (openssl enc -aes-128-ctr -nosalt -pass "pass:$2" </dev/zero 2>/dev/null || true) | head -c "$1"; }
log "generating $WEIGHTS_SHARDS x $((WEIGHTS_SHARD >> 20)) MiB of weights"
for i in $(seq 0 $((WEIGHTS_SHARDS - 1))); do gen "$WEIGHTS_SHARD" "node$i" >"$src/model/pytorch_model-0000$i.bin"; done
printf '{}' >"$src/model/config.json"

export AWS_ACCESS_KEY_ID=$WARMD_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$WARMD_TEST_S3_SECRET_KEY AWS_REGION=us-east-1
export WARMD_GPU_INVENTORY_FILE=$inventory # nvml.EnvRecordedInventory: the recorded H100 node

# --- the compile-cache bundle: a first node of the SKU captured its tree and pushed it ---
seed=$work/seed
mkdir -p "$seed/compile-cache/$sku"
nfiles=$("$work/cachegen" -out "$seed/compile-cache/$sku" -spec "$CACHE_SPEC")
cache_bytes=$(du -sb "$seed/compile-cache/$sku" | cut -f1)
cat >"$work/seed.yaml" <<YAML
apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: bench-seed
dataDir: $seed
s3: {endpoint: $WARMD_TEST_S3}
compileCache: {remote: 's3://$bucket/cache'}
YAML
"$warmd" cache push --config "$work/seed.yaml" --sku "$sku" >"$work/push.log" 2>&1 || { cat "$work/push.log" >&2; exit 1; }
rm -rf "$seed"
log "compile cache for $sku: $nfiles files, $((cache_bytes >> 20)) MiB, pushed to s3://$bucket/cache"

# --- the four configurations ---
data=$work/data
header() { # header <name> [unpack]
  cat <<YAML
apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: bench-$1
dataDir: $data
containerd: {address: $sock, backend: containerd, unpack: ${2:-warmd}}
s3: {endpoint: $WARMD_TEST_S3}
readiness: {disabled: true}
api: {listen: '127.0.0.1:0'}
phases: {podLogDir: $work/pods}
YAML
}
mkdir -p "$work/pods"
{ header all; cat <<YAML; } >"$work/all.yaml"
models:
- name: $model
  source: s3://$bucket/model/
  image: $ref
compileCache: {remote: 's3://$bucket/cache'}
YAML
{ header daemon daemon; cat <<YAML; } >"$work/daemon.yaml"
models:
- name: $model
  source: s3://$bucket/model/
  image: $ref
compileCache: {remote: 's3://$bucket/cache'}
YAML
{ header image; cat <<YAML; } >"$work/image.yaml"
images:
- ref: $ref
compileCache: {disabled: true}
YAML
{ header weights; cat <<YAML; } >"$work/weights.yaml"
models:
- name: $model
  source: s3://$bucket/model/
compileCache: {disabled: true}
YAML
{ header cache; cat <<YAML; } >"$work/cache.yaml"
compileCache: {remote: 's3://$bucket/cache'}
YAML

# Each leg's "done", from the daemon's own status (the same facts readiness.warm is computed from).
jq_image='any(.sections.images.images[]?; (.digest // "") != "" and .pinned)'
jq_weights='any(.sections.weights.models[]?; .model == $m and .state == "ready")'
jq_cache='.sections.compileCache.state == "ready" and .sections.compileCache.sku == $s and (.sections.compileCache.restored // 0) > 0'
jq_failed='any(.sections.images.images[]?; .state == "failed") or any(.sections.weights.models[]?; .state == "failed") or .sections.compileCache.state == "error"'
jq_all=".sections.readiness.warm == true and ($jq_image) and ($jq_weights) and ($jq_cache)"

# remove_image deletes every ref pointing at the image, waits for the garbage collector, and checks
# that no manifest is left (as bench-images does).
remove_image() {
  local names
  names=$($ctr images ls 2>/dev/null | awk -v d="$digest" 'NR>1 && $3==d {print $1}')
  if [ -n "$names" ]; then
    # shellcheck disable=SC2086
    $ctr images rm --sync $names >/dev/null 2>&1
  fi
  if $ctr content ls 2>/dev/null | awk 'NR>1 {print $1}' | grep -qx "$digest"; then
    log "manifest $digest still in the content store after removal"; return 1
  fi
}

now() { date +%s.%N; }

# cpu <pid...>: the user+system CPU seconds the processes have used so far (/proc/<pid>/stat). The
# services' CPU (containerd unpacks and decompresses, the registry and S3 serve) is the node's work as
# much as warmd's own; on a machine with few cores it bounds how much the legs can overlap.
cpu() {
  local p sum=0 f
  for p in "$@"; do
    f=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
    sum=$((sum + $(awk '{print $12 + $13}' <<<"$f")))
  done
  echo "scale=2; $sum / $(getconf CLK_TCK)" | bc
}
svc_pids=()
if [ -r "${WARMD_TESTENV_DIR:-}/pids" ]; then mapfile -t svc_pids <"$WARMD_TESTENV_DIR/pids"; fi

# run <config>: a fresh node; prints the seconds until the config's goal is met.
run() {
  local name=$1 expr
  case $name in
  all | daemon) expr=$jq_all ;; image) expr=$jq_image ;; weights) expr=$jq_weights ;; cache) expr=$jq_cache ;;
  esac
  remove_image
  rm -rf "$data"
  sync
  local t0 t1 st svc0 wcpu scpu
  svc0=$(cpu "${svc_pids[@]}")
  t0=$(now)
  "$warmd" run --config "$work/$name.yaml" --log-format json >"$work/$name.log" 2>&1 &
  wpid=$!
  while :; do
    if ! kill -0 "$wpid" 2>/dev/null; then log "$name: warmd exited"; tail -20 "$work/$name.log" >&2; return 1; fi
    if st=$("$warmd" status --data-dir "$data" -o json 2>/dev/null) &&
      jq -e --arg d "$digest" --arg m "$model" --arg s "$sku" "$expr" >/dev/null <<<"$st"; then
      t1=$(now)
      break
    fi
    if [ -n "$st" ] && jq -e "$jq_failed" >/dev/null <<<"$st"; then
      log "$name: a leg failed"; echo "$st" >&2; return 1
    fi
    if (($(echo "$(now) - $t0 > $TIMEOUT" | bc))); then
      log "$name: not done after ${TIMEOUT}s"; echo "$st" >"$work/$name.status.json"; tail -20 "$work/$name.log" >&2; return 1
    fi
    sleep "$POLL"
  done
  wcpu=$(cpu "$wpid")
  scpu=$(echo "$(cpu "${svc_pids[@]}") - $svc0" | bc)
  kill "$wpid"; wait "$wpid" 2>/dev/null || true; wpid=
  echo "$t1 - $t0" | bc -l | xargs printf '%.2f\n' >>"$work/$name.times"
  echo "$wcpu + $scpu" | bc | xargs printf '%.2f\n' >>"$work/$name.cpu"
  log "  $name: $(tail -1 "$work/$name.times")s, CPU ${wcpu}s warmd + ${scpu}s services"
  echo "$st" >"$work/$name.status.json"
}

confs=(all image weights cache daemon)
for ((r = 1; r <= ROUNDS; r++)); do
  line=
  for ((i = 0; i < ${#confs[@]}; i++)); do
    c=${confs[$(((r - 1 + i) % ${#confs[@]}))]} # rotate the starting configuration every round
    run "$c"
    line+=" $c $(tail -1 "$work/$c.times")s"
  done
  log "round $r:$line (load average $(cut -d' ' -f1-3 /proc/loadavg))"
done
remove_image
rm -rf "$data"

median() { sort -g "$work/$1" | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
t=$(median all.times); i=$(median image.times); w=$(median weights.times); c=$(median cache.times); d=$(median daemon.times)
for n in "${confs[@]}"; do log "$n runs: $(tr '\n' ' ' <"$work/$n.times")s; CPU $(tr '\n' ' ' <"$work/$n.cpu")s"; done
ct=$(median all.cpu); ci=$(median image.cpu); cw=$(median weights.cpu); cc=$(median cache.cpu); cdm=$(median daemon.cpu)
log "median CPU seconds (warmd + containerd, registry, S3): all $ct (daemon unpacking: $cdm), image $ci, weights $cw, cache $cc (sum of legs $(echo "$ci + $cw + $cc" | bc)); on $(nproc) cores the whole cannot finish before $(echo "scale=2; $ct / $(nproc)" | bc)s even if nothing else ran"
log "data: image $(jq -r --arg d "$digest" '[.sections.images.images[]? | select(.digest == $d) | .totalBytes] | first // "?"' "$work/image.status.json") bytes, weights $weights_bytes bytes, compile cache $cache_bytes bytes ($nfiles files)"
slowest=$(printf '%s\n' "$i" "$w" "$c" | sort -g | tail -1)
log "warm / daemon_warm: $(echo "$t / $d" | bc -l | xargs printf '%.2f') (goal <= 0.5)"
printf 'node: warm %.2fs, legs image %.2fs weights %.2fs cache %.2fs, overlap %.2f, daemon_warm %.2fs\n' "$t" "$i" "$w" "$c" "$(echo "$t / $slowest" | bc -l)" "$d"

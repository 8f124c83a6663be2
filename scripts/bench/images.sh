#!/usr/bin/env bash
# images.sh is `make bench-images`: how long warmd takes to pull, unpack and pin an image through
# containerd 2.4.2 from a loopback registry, against `ctr images pull` and `crictl pull` on the same
# daemon, each timed until the image is pulled, unpacked and pinned (ctr and crictl do not pin, so
# their timed step includes `ctr images label … io.cri-containerd.pinned=pinned`).
#
# The image is vLLM-shaped by default (hack/imagegen -mode realistic: 13 gzip layers, the biggest
# ~2.3 GiB compressed, ~6.5 GiB uncompressed in all, content that compresses ~2:1 like wheels and
# .so files), so gunzip and file creation are measured as on a real node. BIG_LAYER (bytes,
# uncompressed) shrinks it for development. QUICK=1 uses the old quick image instead: 5
# incompressible uncompressed 100 MiB layers.
#
# A fourth run per round, warmd-parallel, is warmd with containerd.unpack: parallel (warmd has the
# daemon apply layers side by side and rebases the chain); it is logged, while the contract line's
# warmd is the default (unpack: daemon), so the line says what a NodeConfig gets.
#
# Fairness: same daemon, same config; before every pull the image is removed completely (every ref,
# then a synchronous GC) and the script checks that no layer blob and no snapshot of it is left;
# after every pull it checks, whatever the tool, that every layer blob is in the content store, the
# snapshots are there, and the CRI reports the image pinned. The starting tool rotates every round
# so drift in the page cache or disk hits all three alike; medians of ROUNDS (5) are reported, with
# every round's figures in the log. The machine this runs on may be shared: say so with the figures.
# Runs under scripts/with-testenv.sh (WARMD_TEST_CONTAINERD, WARMD_TEST_REGISTRY, KUBEBUILDER_ASSETS).
# Last line: images: warmd <X.XX>s, ctr <Y.YY>s, crictl <W.WW>s, ratio <Z.ZZ>   (ratio = warmd/ctr,
# below 1 when warmd is faster; the log also prints the speedup ctr/warmd)
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
ROUNDS=${ROUNDS:-5}
QUICK=${QUICK:-}
LAYERS=${LAYERS:-5}
LAYER_SIZE=${LAYER_SIZE:-$((100 << 20))}
BIG_LAYER=${BIG_LAYER:-$((4608 << 20))}
CRICTL_VERSION=v1.37.0
: "${WARMD_TEST_CONTAINERD:?run through scripts/with-testenv.sh (make bench-images)}"
: "${WARMD_TEST_REGISTRY:?run through scripts/with-testenv.sh (make bench-images)}"
: "${KUBEBUILDER_ASSETS:?run through scripts/with-testenv.sh (make bench-images)}"
sock=$WARMD_TEST_CONTAINERD
ctr="$KUBEBUILDER_ASSETS/ctr --address $sock -n k8s.io"
log() { echo "bench-images: $*" >&2; }

work=$(mktemp -d /tmp/wbimg-XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- tools ---
[ -x bin/warmd ] || CGO_ENABLED=1 go build -o bin/warmd ./cmd/warmd
warmd=bin/warmd
tools=${WARMD_TESTBIN_CACHE:-$HOME/.cache/warmd-testbin}/bench-tools
crictl=$tools/crictl-$CRICTL_VERSION
if [ ! -x "$crictl" ]; then
  log "building crictl $CRICTL_VERSION (once per machine)"
  mkdir -p "$tools"
  tmp=$(mktemp -d "$tools/.build-XXXXXX")
  GOBIN=$tmp CGO_ENABLED=0 go install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  mv "$tmp/crictl" "$crictl"
  rmdir "$tmp"
fi
go build -o "$work/imagegen" ./hack/imagegen

# --- the image ---
if [ -n "$QUICK" ]; then
  ref=$WARMD_TEST_REGISTRY/warmd-bench/images:500m
  log "pushing $LAYERS x $LAYER_SIZE-byte incompressible layers to $ref"
  digest=$("$work/imagegen" --ref "$ref" --layers "$LAYERS" --layer-size "$LAYER_SIZE" | tail -1)
else
  ref=$WARMD_TEST_REGISTRY/warmd-bench/images:vllm
  log "generating and pushing the vLLM-shaped image (biggest layer $BIG_LAYER bytes uncompressed) to $ref"
  digest=$("$work/imagegen" --mode realistic --ref "$ref" --big-layer "$BIG_LAYER" --tmp "$work" | tail -1)
fi
log "image $digest"
# the layer blobs, from the registry's manifest, for the checks below
mapfile -t layer_digests < <(curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://$WARMD_TEST_REGISTRY/v2/warmd-bench/images/manifests/$digest" |
  python3 -c 'import json,sys; print("\n".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')
log "${#layer_digests[@]} layers"
snaps_before=$($ctr snapshots ls 2>/dev/null | awk 'NR>1' | wc -l)

cat >"$work/config.yaml" <<YAML
apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: bench
dataDir: $work/data
containerd:
  address: $sock
  backend: containerd
images:
- ref: $ref
YAML
# the same with containerd.unpack: parallel (layers applied side by side), measured in the same
# rounds and logged; the contract line's warmd is the default (unpack: daemon)
sed 's/^  backend: containerd$/  backend: containerd\n  unpack: parallel/' "$work/config.yaml" >"$work/config-parallel.yaml"

# remove_image deletes every ref pointing at the image (ours, ctr's, the CRI's aliases), waits for
# the garbage collector, and checks no layer content is left.
remove_image() {
  local names
  names=$($ctr images ls 2>/dev/null | awk -v d="$digest" 'NR>1 && $3==d {print $1}')
  if [ -n "$names" ]; then
    # shellcheck disable=SC2086
    $ctr images rm --sync $names >/dev/null 2>&1
  fi
  if $ctr images ls 2>/dev/null | awk -v d="$digest" 'NR>1 && $3==d' | grep -q .; then
    log "image $digest still has refs after removal"; return 1
  fi
  if $ctr content ls 2>/dev/null | awk 'NR>1 {print $1}' | grep -qx "$digest"; then
    log "manifest $digest still in the content store after removal"; return 1
  fi
  local have
  have=$($ctr content ls 2>/dev/null | awk 'NR>1 {print $1}')
  for l in "${layer_digests[@]}"; do
    if grep -qx "$l" <<<"$have"; then log "layer $l still in the content store after removal"; return 1; fi
  done
  local snaps
  snaps=$($ctr snapshots ls 2>/dev/null | awk 'NR>1' | wc -l)
  if [ "$snaps" -gt "$snaps_before" ]; then
    log "$snaps snapshots after removal, $snaps_before before the benchmark"; return 1
  fi
}

# check_image <tool>: the image is there, every layer blob is in the content store, one snapshot per
# layer exists, and the CRI reports it pinned.
check_image() {
  local name=$1 have snaps
  $ctr images ls 2>/dev/null | awk -v d="$digest" 'NR>1 && $3==d' | grep -q . || { log "$name left no image"; return 1; }
  have=$($ctr content ls 2>/dev/null | awk 'NR>1 {print $1}')
  for l in "${layer_digests[@]}"; do
    grep -qx "$l" <<<"$have" || { log "$name left layer $l out of the content store"; return 1; }
  done
  snaps=$($ctr snapshots ls 2>/dev/null | awk 'NR>1' | wc -l)
  if [ "$snaps" -lt $((snaps_before + ${#layer_digests[@]})) ]; then
    log "$name left $snaps snapshots, want $snaps_before + ${#layer_digests[@]} (not unpacked)"; return 1
  fi
  "$crictl" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" inspecti -o json "$ref" 2>/dev/null |
    grep -q '"pinned": true' || { log "$name: the CRI does not report $ref pinned"; return 1; }
}

now() { date +%s.%N; }

# timed <name> <cmd...>: remove the image, run the pull, append the seconds to $work/<name>.
timed() {
  local name=$1; shift
  remove_image
  sync
  local t0 t1
  t0=$(now)
  if ! "$@" >"$work/$name.out" 2>&1; then
    log "$name failed:"; cat "$work/$name.out" >&2; return 1
  fi
  t1=$(now)
  echo "$t1 - $t0" | bc -l >>"$work/$name"
  # every tool must leave the image present, unpacked and pinned
  check_image "$name"
}

# ctr pull and crictl pull as a node operator would run them. ctr 2.x pulls through the Transfer
# service and unpacks into the default snapshotter, as warmd does.
run_warmd() { "$warmd" prefetch images --config "$work/config.yaml" --progress none --log-level error; }
run_warmdpar() { "$warmd" prefetch images --config "$work/config-parallel.yaml" --progress none --log-level error; }
pin() { $ctr images label "$ref" io.cri-containerd.pinned=pinned; }
run_ctr() { $ctr images pull --plain-http "$ref" && pin; }
run_crictl() { "$crictl" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 30m pull "$ref" && pin; }

# one unmeasured warm-up of each (registry page cache, binaries in memory)
timed warmup run_warmd; timed warmup run_warmdpar; timed warmup run_ctr; timed warmup run_crictl
rm -f "$work/warmup"
order=(warmd warmdpar ctr crictl)
for ((r = 1; r <= ROUNDS; r++)); do
  # rotate the starting tool every round
  for ((i = 0; i < ${#order[@]}; i++)); do
    t=${order[$(((r + i) % ${#order[@]}))]}
    timed "$t" "run_$t"
  done
  log "round $r: warmd $(tail -1 "$work/warmd")s warmd-parallel $(tail -1 "$work/warmdpar")s ctr $(tail -1 "$work/ctr")s crictl $(tail -1 "$work/crictl")s"
done
remove_image

median() { sort -g "$1" | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "$work/warmd"); mc=$(median "$work/ctr"); mr=$(median "$work/crictl"); mp=$(median "$work/warmdpar")
log "warmd runs: $(tr '\n' ' ' <"$work/warmd")"
log "ctr runs: $(tr '\n' ' ' <"$work/ctr")"
log "crictl runs: $(tr '\n' ' ' <"$work/crictl")"
log "warmd-parallel runs: $(tr '\n' ' ' <"$work/warmdpar")"
log "warmd $(grep -m1 '^Backend:' "$work/warmd.out")"
log "warmd-parallel $(grep -m1 '^Backend:' "$work/warmdpar.out")"
log "speedup ctr/warmd-parallel $(echo "$mc / $mp" | bc -l | xargs printf '%.2f')x (containerd.unpack: parallel; not the default, see pkg/config/types.go)"
log "speedup ctr/warmd $(echo "$mc / $mw" | bc -l | xargs printf '%.2f')x (goal 1.5x), crictl/warmd $(echo "$mr / $mw" | bc -l | xargs printf '%.2f')x"
printf 'images: warmd %.2fs, ctr %.2fs, crictl %.2fs, ratio %.2f\n' "$mw" "$mc" "$mr" "$(echo "$mw / $mc" | bc -l)"

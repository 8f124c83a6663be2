#!/usr/bin/env bash
# images.sh is `make bench-images`: how long warmd takes to pull, unpack and pin a 500 MiB image
# (5 incompressible 100 MiB layers) through containerd 2.4.2 from a loopback registry, against
# `ctr images pull` and `crictl pull` on the same daemon. Before every pull the image is removed
# completely (every ref, then a synchronous GC of content and snapshots, checked). Tools alternate
# within each round so drift in the page cache or disk hits all three alike; medians are reported.
# Runs under scripts/with-testenv.sh (WARMD_TEST_CONTAINERD, WARMD_TEST_REGISTRY, KUBEBUILDER_ASSETS).
# Last line: images: warmd <X.XX>s, ctr <Y.YY>s, crictl <W.WW>s, ratio <Z.ZZ>   (ratio = warmd/ctr)
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
ROUNDS=${ROUNDS:-5}
LAYERS=${LAYERS:-5}
LAYER_SIZE=${LAYER_SIZE:-$((100 << 20))}
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
ref=$WARMD_TEST_REGISTRY/warmd-bench/images:500m
log "pushing $LAYERS x $LAYER_SIZE-byte incompressible layers to $ref"
digest=$("$work/imagegen" --ref "$ref" --layers "$LAYERS" --layer-size "$LAYER_SIZE" | tail -1)
log "image $digest"

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
  # every tool must leave the image present and unpacked
  $ctr images ls 2>/dev/null | awk -v d="$digest" 'NR>1 && $3==d' | grep -q . || { log "$name left no image"; return 1; }
}

# ctr pull and crictl pull as a node operator would run them. ctr 2.x pulls through the Transfer
# service and unpacks into the default snapshotter, as warmd does.
run_warmd() { "$warmd" prefetch images --config "$work/config.yaml" --progress none --log-level error; }
run_ctr() { $ctr images pull --plain-http "$ref"; }
run_crictl() { "$crictl" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 10m pull "$ref"; }

# one unmeasured warm-up of each (registry page cache, binaries in memory)
timed warmup run_warmd; timed warmup run_ctr; timed warmup run_crictl
rm -f "$work/warmup"
order=(warmd ctr crictl)
for ((r = 1; r <= ROUNDS; r++)); do
  # rotate the starting tool every round
  for ((i = 0; i < 3; i++)); do
    t=${order[$(((r + i) % 3))]}
    timed "$t" "run_$t"
  done
  log "round $r: warmd $(tail -1 "$work/warmd")s ctr $(tail -1 "$work/ctr")s crictl $(tail -1 "$work/crictl")s"
done
remove_image

median() { sort -g "$1" | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "$work/warmd"); mc=$(median "$work/ctr"); mr=$(median "$work/crictl")
log "warmd runs: $(tr '\n' ' ' <"$work/warmd")"
log "ctr runs: $(tr '\n' ' ' <"$work/ctr")"
log "crictl runs: $(tr '\n' ' ' <"$work/crictl")"
log "warmd $(grep -m1 '^Backend:' "$work/warmd.out")"
printf 'images: warmd %.2fs, ctr %.2fs, crictl %.2fs, ratio %.2f\n' "$mw" "$mc" "$mr" "$(echo "$mw / $mc" | bc -l)"

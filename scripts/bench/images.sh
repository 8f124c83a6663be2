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
# Arms, each timed until the image is pulled, unpacked and pinned:
#   warmd        containerd.unpack: warmd (warmd inflates with pkg/inflate and untars itself), cold:
#                no checkpoint index anywhere (the data dir's images/gzindex is emptied first);
#   warmd_index  the same with the index the previous warmd pull left (the big layer on every core);
#   ctr, crictl  on the daemon as most hosts run it: Go's decoder (the daemon is started with
#                CONTAINERD_DISABLE_IGZIP=1 CONTAINERD_DISABLE_PIGZ=1, so a host that happens to have
#                them does not change the baseline);
#   ctr_igzip    ctr on a second containerd 2.4.2 with the same config, its own root on the same disk,
#                and igzip (Debian isal) and unpigz (pigz) on its PATH: the best-configured peer.
#   warmd_peer   a fresh node's `warmd prefetch images` (containerd.unpack: warmd, no index of its own)
#                with peers.enabled and one warm peer holding the image: test/fleet's
#                TestImageFromAWarmPeer as this bench's world (a real kube-apiserver; the peer is
#                `warmd run` on a third containerd 2.4.2 with its own root, which pulled, unpacked and
#                pinned the image itself, built the big layer's index on the way, and labelled its
#                Node), so the fresh node finds it through the API server, passes its TokenReview and
#                takes the layers and their indexes from it over loopback.
#
# The registry above is on loopback, as fast as the warm peer, so a peer can only add its own CPU;
# a node's real registry is further away than its neighbours. WAN rounds (ROUNDS_WAN, default 3;
# 0 leaves them out) therefore run again with the registry's answers shaped to WAN_MBIT Mbit/s
# (default 1000: a node's share of a registry over a 1 GbE-class path; BentoML's 8.73 GB in 5-6
# minutes is ~200 Mbit/s) by the kernel itself: an HTB class on `lo` that only packets from the
# registry's port enter (u32 on the source port), everything else on `lo` unshaped. The shaping is
# checked before the rounds (a 64 MiB range from the registry must arrive at no more than 1.1x the
# rate) and removed on exit. Arms: ctr_igzip (the best-configured peer, from the shaped registry),
# warmd cold (from the shaped registry), warmd_peer (the warm peer over unshaped loopback; what it
# does not hold, the manifest, config and small layers, still comes from the shaped registry).
#
# Fairness: same daemon, same config; before every pull the image is removed completely (every ref,
# then a synchronous GC) and the script checks that no layer blob and no snapshot of it is left;
# after every pull it checks, whatever the tool, that every layer blob is in the content store, the
# snapshots are there, and the CRI reports the image pinned. The starting tool rotates every round
# so drift in the page cache or disk hits all three alike; medians of ROUNDS (5) are reported, with
# every round's figures in the log. The machine this runs on may be shared: say so with the figures.
# Runs under scripts/with-testenv.sh (WARMD_TEST_CONTAINERD, WARMD_TEST_REGISTRY, KUBEBUILDER_ASSETS).
# Last line: images: warmd W s, warmd_index X s, warmd_peer P s, ctr C s, ctr_igzip G s, crictl R s,
# ratio C/W, ratio_igzip G/W, ratio_peer G/P, floor F s   (F: the uncompressed bytes over this disk's
# direct-write rate, measured here with dd), after the WAN rounds' line:
# images_wan: registry M Mbit/s, warmd W s, warmd_peer P s, ctr_igzip G s, ratio_igzip G/W, ratio_peer G/P
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
ROUNDS=${ROUNDS:-5}
ROUNDS_WAN=${ROUNDS_WAN:-3}
WAN_MBIT=${WAN_MBIT:-1000}
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
ctr1=$ctr
log() { echo "bench-images: $*" >&2; }

work=$(mktemp -d /tmp/wbimg-XXXXXX)
igz_pid=
world_pid=
stop_world() {
  [ -n "$world_pid" ] || return 0
  touch "$work/world/stop"
  for _ in $(seq 120); do kill -0 "$world_pid" 2>/dev/null || break; sleep 0.5; done
  kill "$world_pid" 2>/dev/null || true
  world_pid=
}
shaped=
unshape() { [ -z "$shaped" ] || { tc qdisc del dev lo root 2>/dev/null || true; shaped=; }; }
trap 'unshape; stop_world; [ -n "$igz_pid" ] && kill "$igz_pid" 2>/dev/null; sleep 1; rm -rf "$work"' EXIT

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

# --- the best-configured peer: a second containerd 2.4.2 with igzip and unpigz on its PATH ---
if ! command -v igzip >/dev/null || ! command -v unpigz >/dev/null; then
  log "installing isal (igzip) and pigz (unpigz) for the ctr_igzip arm"
  # shellcheck source=scripts/apt.sh
  source scripts/apt.sh
  apt_install isal pigz >&2
fi
c3=$work/c3
mkdir -p "$c3/certs.d"
cat >"$c3/config.toml" <<TOML
version = 3
root = "$c3/root"
state = "$c3/state"
[grpc]
  address = "$c3/sock"
[ttrpc]
  address = "$c3/sock.ttrpc"
[plugins."io.containerd.cri.v1.images".registry]
  config_path = "$c3/certs.d"
[plugins."io.containerd.transfer.v1.local"]
  config_path = "$c3/certs.d"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
TOML
PATH=$KUBEBUILDER_ASSETS:$PATH setsid "$KUBEBUILDER_ASSETS/containerd" --config "$c3/config.toml" >"$work/c3.log" 2>&1 &
igz_pid=$!
for _ in $(seq 100); do "$KUBEBUILDER_ASSETS/ctr" --address "$c3/sock" version >/dev/null 2>&1 && break; sleep 0.2; done
ctr3="$KUBEBUILDER_ASSETS/ctr --address $c3/sock -n k8s.io"
log "ctr_igzip daemon at $c3/sock with $(command -v igzip) and $(command -v unpigz) on its PATH"

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

# --- the warm peer (warmd_peer): test/fleet's world on a real kube-apiserver; it pulls the image
# into its own containerd and writes the fresh node's config once its Node is labelled ---
mkdir -p "$work/world"
log "starting the warm peer (test/fleet TestImageFromAWarmPeer as this bench's world; log $work/world.log)"
WARMD_IMAGES_WORLD=$work/world WARMD_IMAGES_REF=$ref \
  go test -count=1 -timeout 240m -v -run '^TestImageFromAWarmPeer$' ./test/fleet/ >"$work/world.log" 2>&1 &
world_pid=$!
for _ in $(seq 3600); do
  [ -f "$work/world/ready" ] && break
  if ! kill -0 "$world_pid" 2>/dev/null; then log "the warm peer's world ended before it was ready:"; tail -50 "$work/world.log" >&2; exit 1; fi
  sleep 1
done
[ -f "$work/world/ready" ] || { log "the warm peer was not ready in an hour"; tail -50 "$work/world.log" >&2; exit 1; }
peer_pid=$(pgrep -f "warmd run --config .*warm-10.yaml" | head -1)
log "warm peer ready (its warmd: pid ${peer_pid:-?}); the fresh node's config is $work/world/fresh.yaml"
snaps_before=$($ctr1 snapshots ls 2>/dev/null | awk 'NR>1' | wc -l)
snaps_before3=0
echo "$snaps_before" >"$work/snaps_before"

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
sed -i 's/^  backend: containerd$/  backend: containerd\n  unpack: warmd/' "$work/config.yaml"
grep -q 'unpack: warmd' "$work/config.yaml"

# remove_image deletes every ref pointing at the image (ours, ctr's, the CRI's aliases), waits for
# the garbage collector, and checks no layer content is left.
remove_image() {
  local ctr=$ctr snaps_before=$snaps_before names
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
  local name=$1 ctr=$ctr snaps_before=$snaps_before sock=$sock have snaps
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

# timed <name> <cmd...>: remove the image, run the pull, append the seconds to $work/<name>. The
# ctr_igzip arm runs against its own daemon; every other against the testenv's.
timed() {
  local name=$1; shift
  if [ "${name%_wan}" = ctr_igzip ]; then
    ctr=$ctr3 sock=$c3/sock snaps_before=$snaps_before3
  else
    ctr=$ctr1 sock=$WARMD_TEST_CONTAINERD snaps_before=$(cat "$work/snaps_before")
  fi
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
run_warmd() { rm -rf "$work/data/images/gzindex"; run_warmd_index; }
run_warmd_index() { "$warmd" prefetch images --config "$work/config.yaml" --progress none --log-level info; }
# cpu_seconds <pid>: the process's user+system CPU seconds so far
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# the fresh node keeps no index of its own between rounds: it takes the peer's with the layers
run_warmd_peer() {
  rm -rf "$work/world/fresh/images/gzindex"
  "$warmd" prefetch images --config "$work/world/fresh.yaml" --progress none --log-level info
}
pin() { $ctr images label "$ref" io.cri-containerd.pinned=pinned; }
run_ctr() { $ctr images pull --plain-http "$ref" && pin; }
run_ctr_igzip() { run_ctr; }
run_crictl() { "$crictl" --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 30m pull "$ref" && pin; }

# one unmeasured warm-up of each (registry page cache, binaries in memory)
timed warmup run_warmd; timed warmup run_ctr; timed warmup run_ctr_igzip; timed warmup run_crictl
timed warmup run_warmd_peer
rm -f "$work/warmup"
# warmd_index always follows warmd (it uses the index that pull left); the pairs rotate with the rest
order=(warmd ctr ctr_igzip crictl warmd_peer)
for ((r = 1; r <= ROUNDS; r++)); do
  # rotate the starting tool every round
  for ((i = 0; i < ${#order[@]}; i++)); do
    t=${order[$(((r + i) % ${#order[@]}))]}
    [ "$t" = warmd_peer ] && peer_cpu0=$(cpu_seconds "$peer_pid")
    timed "$t" "run_$t"
    if [ "$t" = warmd ]; then
      grep -o 'decoder=[a-z-]*' "$work/warmd.out" | sort | uniq -c | tr '\n' ' ' | sed 's/^/bench-images: warmd decoders: /' >&2; echo >&2
      timed warmd_index run_warmd_index
      grep -o 'decoder=[a-z-]*' "$work/warmd_index.out" | sort | uniq -c | tr '\n' ' ' | sed 's/^/bench-images: warmd_index decoders: /' >&2; echo >&2
    fi
    if [ "$t" = warmd_peer ]; then
      log "warmd_peer: the warm peer's warmd spent $(awk -v a="$(cpu_seconds "$peer_pid")" -v b="$peer_cpu0" 'BEGIN { printf "%.1f", a - b }') CPU-s serving this round, on the cores the fresh node decodes on (separate machines would not share them)"
      from_peers=$(grep -c 'layer taken from peers' "$work/warmd_peer.out" || true)
      log "warmd_peer: $from_peers of ${#layer_digests[@]} layers taken from the warm peer (layers under 1 MiB come from the registry); decoders: $(grep -o 'decoder=[a-z-]*' "$work/warmd_peer.out" | sort | uniq -c | tr '\n' ' ')"
      [ "$from_peers" -gt 0 ] || { log "warmd_peer took no layer from the peer:"; cat "$work/warmd_peer.out" >&2; exit 1; }
    fi
  done
  log "round $r: warmd $(tail -1 "$work/warmd")s warmd_index $(tail -1 "$work/warmd_index")s warmd_peer $(tail -1 "$work/warmd_peer")s ctr $(tail -1 "$work/ctr")s ctr_igzip $(tail -1 "$work/ctr_igzip")s crictl $(tail -1 "$work/crictl")s"
done

# --- WAN rounds: the registry's answers shaped on lo (see the header) ---
# shape <mbit>: every packet from the registry's port through an HTB class of that rate; checked.
shape() {
  local port=${WARMD_TEST_REGISTRY##*:} root
  root=$(tc qdisc show dev lo | awk '$3 == "root" {print $2}' | head -1)
  if [ -n "$root" ] && [ "$root" != noqueue ]; then
    log "lo already has a $root qdisc; the WAN rounds do not replace what someone else set (ROUNDS_WAN=0 leaves them out)"; return 1
  fi
  shaped=1
  tc qdisc add dev lo root handle 1: htb default 10
  tc class add dev lo parent 1: classid 1:10 htb rate 100gbit quantum 65536
  tc class add dev lo parent 1: classid 1:20 htb rate "$1mbit" ceil "$1mbit" quantum 65536
  tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport "$port" 0xffff flowid 1:20
  local big t0 t1 rate
  big=$(curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$WARMD_TEST_REGISTRY/v2/warmd-bench/images/manifests/$digest" |
    python3 -c 'import json,sys; print(max(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])')
  t0=$(now)
  curl -fsS -L -r 0-67108863 -o /dev/null "http://$WARMD_TEST_REGISTRY/v2/warmd-bench/images/blobs/$big"
  t1=$(now)
  rate=$(echo "67108864 * 8 / ($t1 - $t0) / 1000000" | bc -l)
  log "WAN: the registry's answers shaped to $1 Mbit/s on lo (sport $port); 64 MiB of $big came at $(printf '%.0f' "$rate") Mbit/s"
  if (($(echo "$rate > $1 * 1.1" | bc -l))); then log "the shaping does not hold: $rate Mbit/s > 1.1 x $1"; return 1; fi
}
if [ "$ROUNDS_WAN" -gt 0 ]; then
  shape "$WAN_MBIT"
  order_wan=(warmd ctr_igzip warmd_peer)
  for ((r = 1; r <= ROUNDS_WAN; r++)); do
    for ((i = 0; i < ${#order_wan[@]}; i++)); do
      t=${order_wan[$(((r + i) % ${#order_wan[@]}))]}
      timed "${t}_wan" "run_$t"
    done
    log "WAN round $r: warmd $(tail -1 "$work/warmd_wan")s warmd_peer $(tail -1 "$work/warmd_peer_wan")s ctr_igzip $(tail -1 "$work/ctr_igzip_wan")s"
  done
  unshape
fi
stop_world
ctr=$ctr1 sock=$WARMD_TEST_CONTAINERD; remove_image
ctr=$ctr3 snaps_before=0; remove_image

# floor: the uncompressed bytes over this disk's direct-write rate (dd, 2 GiB, on the same disk)
unc=$(grep -o 'inflated=[0-9]*' "$work/warmd.out" | awk -F= '{s+=$2} END {print s}')
dd_out=$(dd if=/dev/zero of="$work/ddtest" bs=4M count=512 oflag=direct 2>&1 | tail -1)
rm -f "$work/ddtest"
rate=$(awk '{for (i=1;i<=NF;i++) if ($i ~ /^s,$/) print 2147483648/$(i-1)}' <<<"$dd_out")

median() { sort -g "$1" | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
mw=$(median "$work/warmd"); mx=$(median "$work/warmd_index"); mp=$(median "$work/warmd_peer"); mc=$(median "$work/ctr"); mg=$(median "$work/ctr_igzip"); mr=$(median "$work/crictl")
for a in warmd warmd_index warmd_peer ctr ctr_igzip crictl; do log "$a runs: $(tr '\n' ' ' <"$work/$a")"; done
log "warmd $(grep -m1 'image backend ready' "$work/warmd.out" | cut -c1-300)"
log "disk: $dd_out"
floor=$(awk -v u="${unc:-0}" -v r="${rate:-1}" 'BEGIN {print u / r}')
log "floor: $unc uncompressed bytes (the layers' tars, from warmd's log) at $rate B/s direct write"
if [ "$ROUNDS_WAN" -gt 0 ]; then
  ww=$(median "$work/warmd_wan"); wp=$(median "$work/warmd_peer_wan"); wg=$(median "$work/ctr_igzip_wan")
  for a in warmd_wan warmd_peer_wan ctr_igzip_wan; do log "$a runs: $(tr '\n' ' ' <"$work/$a")"; done
  printf 'images_wan: registry %s Mbit/s, warmd %.2fs, warmd_peer %.2fs, ctr_igzip %.2fs, ratio_igzip %.2f, ratio_peer %.2f\n' \
    "$WAN_MBIT" "$ww" "$wp" "$wg" "$(echo "$wg / $ww" | bc -l)" "$(echo "$wg / $wp" | bc -l)"
fi
printf 'images: warmd %.2fs, warmd_index %.2fs, warmd_peer %.2fs, ctr %.2fs, ctr_igzip %.2fs, crictl %.2fs, ratio %.2f, ratio_igzip %.2f, ratio_peer %.2f, floor %.2fs\n' \
  "$mw" "$mx" "$mp" "$mc" "$mg" "$mr" "$(echo "$mc / $mw" | bc -l)" "$(echo "$mg / $mw" | bc -l)" "$(echo "$mg / $mp" | bc -l)" "$floor"

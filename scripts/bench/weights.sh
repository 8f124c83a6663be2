#!/usr/bin/env bash
# weights.sh is `make bench-weights`: how fast warmd prefetches model weights from S3 (versitygw on
# loopback) to local disk, against s5cmd v2.3.0 (the fastest S3 copier, built from the pinned nested
# module hack/bench-tools/s5cmd), the aws-sdk-go-v2 transfer manager (DownloadDirectory with
# GetObjectType=GetObjectRanges, otherwise its defaults) and a ranged-GET-to-io.Discard ceiling
# (hack/bench-tools/s3peer), on the same generated incompressible data: 1 x 4 GiB + 8 x 512 MiB
# (+ a 2-byte config.json warmd's layout check needs; every tool fetches it), placed directly in
# the versitygw posix root. Tools alternate within each round (warmd, s5cmd, tm, ceiling) so drift
# hits all alike; medians over ROUNDS (>= 3) are reported.
#
# Notes on fairness: the source objects stay in the page cache (we cannot drop caches on shared
# machines: /proc/sys/vm/drop_caches is not ours to touch), so this measures the client + loopback
# + destination-disk path, not the server's disk. Destinations are deleted and `sync`ed between
# runs, outside the timing. Rates are "until the data is durable": each tool's time plus an fsync of
# the files it wrote (timed separately). warmd fsyncs before it publishes (so its extra fsync is
# ~0); s5cmd and the transfer manager exit with up to dirty_ratio of RAM still unwritten, which on
# 8 GiB here is seconds of disk time they would otherwise not be charged. The at-exit rates are
# logged too. warmd's time also includes fallocate and its size check (the placed objects carry no
# ETag or checksum). Peak RSS is GNU time's maximum resident set of the warmd process.
# Runs under scripts/with-testenv.sh (WARMD_TEST_S3, _ACCESS_KEY, _SECRET_KEY, _ROOT).
# Last line: weights: warmd <X.XX> GB/s, s5cmd <Y.YY> GB/s, ratio <Z.ZZ>, ceiling <C.CC> GB/s, peak_rss_mib <R>
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
ROUNDS=${ROUNDS:-3}
BIG=${BIG:-$((4 << 30))}
SHARDS=${SHARDS:-8}
SHARD=${SHARD:-$((512 << 20))}
: "${WARMD_TEST_S3:?run through scripts/with-testenv.sh (make bench-weights)}"
: "${WARMD_TEST_S3_ROOT:?run through scripts/with-testenv.sh (make bench-weights)}"
log() { echo "bench-weights: $*" >&2; }
[ "$ROUNDS" -ge 3 ] || { log "ROUNDS must be >= 3"; exit 2; }

bucket=weights-bench-$$
src=$WARMD_TEST_S3_ROOT/$bucket
work=$(mktemp -d "${TMPDIR:-/tmp}/weights-bench-XXXXXX")
trap 'rm -rf "$work" "$src"' EXIT
total=$((BIG + SHARDS * SHARD + 2))
need_kb=$(((2 * total) / 1024 + (1 << 20)))
for d in "$WARMD_TEST_S3_ROOT" "$work"; do
  avail=$(df -Pk "$d" | awk 'NR==2 {print $4}')
  log "$(df -h "$d" | awk 'NR==2 {print $6": "$4" free"}')"
  if [ "$avail" -lt "$need_kb" ]; then
    log "need $((need_kb >> 20)) GiB free under $d (source + one destination); have $((avail >> 20)) GiB"
    exit 1
  fi
done

# --- tools ---
warmd=${WARMD_BIN:-$PWD/bin/warmd} # make bench-weights builds bin/warmd first
[ -x "$warmd" ] || CGO_ENABLED=1 go build -o "$warmd" ./cmd/warmd
log "building s5cmd v2.3.0 and s3peer"
(cd hack/bench-tools/s5cmd && go build -o "$work/s5cmd" github.com/peak/s5cmd/v2)
go build -o "$work/s3peer" ./hack/bench-tools/s3peer

# --- data: incompressible (AES-CTR keystream), placed as files in the bucket dir ---
mkdir -p "$src"
gen() { (openssl enc -aes-128-ctr -nosalt -pass "pass:$2" </dev/zero 2>/dev/null || true) | head -c "$1"; }
log "generating $((total >> 20)) MiB of incompressible data in $src"
gen "$BIG" big >"$src/model-big.bin"
for i in $(seq 0 $((SHARDS - 1))); do gen "$SHARD" "shard$i" >"$src/model-shard-$i.bin"; done
printf '{}' >"$src/config.json"

export AWS_ACCESS_KEY_ID=$WARMD_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$WARMD_TEST_S3_SECRET_KEY AWS_REGION=us-east-1
dest=$work/dest
results=$work/results
: >"$results"

run() { # run <tool> <round>
  local tool=$1 r=$2
  rm -rf "$dest" && mkdir -p "$dest" && sync
  local cmd
  case $tool in
  warmd) cmd=("$warmd" prefetch weights "s3://$bucket/" "$dest" --name bench/weights --endpoint "$WARMD_TEST_S3" --progress none -o json) ;;
  s5cmd) cmd=("$work/s5cmd" --endpoint-url "$WARMD_TEST_S3" cp "s3://$bucket/*" "$dest/") ;;
  tm) cmd=("$work/s3peer" tm -endpoint "$WARMD_TEST_S3" -bucket "$bucket" -dest "$dest") ;;
  ceiling) cmd=("$work/s3peer" ceiling -endpoint "$WARMD_TEST_S3" -bucket "$bucket") ;;
  esac
  if ! /usr/bin/time -f "%e %M" -o "$work/time" "${cmd[@]}" >"$work/out" 2>&1; then
    log "$tool failed:"; cat "$work/out" >&2; exit 1
  fi
  read -r secs rss_kb <"$work/time"
  local fsync_s=0
  if [ "$tool" != ceiling ]; then
    # Durable: fsync the files the tool wrote (warmd already did; the copiers leave up to
    # dirty_ratio of RAM unwritten at exit). Only these files, so other writers' data is not charged.
    local t0 t1
    t0=$(date +%s.%N)
    find -L "$dest" -type f -print0 | xargs -0 -r sync --data
    t1=$(date +%s.%N)
    fsync_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
    got=$(find "$dest" -path "$dest/.warmd" -prune -o -path "$dest/.staging" -prune -o -type f -printf '%s\n' | awk '{s+=$1} END {printf "%.0f\n", s}')
    if [ "$tool" = warmd ]; then
      got=$(find -L "$dest/models--bench--weights/snapshots" -type f -printf '%s\n' | awk '{s+=$1} END {printf "%.0f\n", s}')
    fi
    [ "$got" -eq "$total" ] || { log "$tool wrote $got bytes, want $total"; cat "$work/out" >&2; exit 1; }
  fi
  gbps=$(awk -v b="$total" -v s="$secs" -v f="$fsync_s" 'BEGIN {printf "%.3f", b / (s + f) / 1e9}')
  exit_gbps=$(awk -v b="$total" -v s="$secs" 'BEGIN {printf "%.3f", b / s / 1e9}')
  log "round $r $tool: ${secs}s + ${fsync_s}s to durable: $gbps GB/s durable ($exit_gbps GB/s at exit), max RSS $((rss_kb / 1024)) MiB"
  echo "$tool $gbps $((rss_kb / 1024)) $exit_gbps" >>"$results"
}

for r in $(seq 1 "$ROUNDS"); do
  for tool in warmd s5cmd tm ceiling; do run "$tool" "$r"; done
done
rm -rf "$dest"

median() { awk -v t="$1" '$1 == t {print $2}' "$results" | sort -g | awk '{v[NR]=$1} END {if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
w=$(median warmd); s=$(median s5cmd); tmv=$(median tm); c=$(median ceiling)
rss=$(awk '$1 == "warmd" && $3 > m {m=$3} END {print m+0}' "$results")
median_exit() { awk -v t="$1" '$1 == t {print $4}' "$results" | sort -g | awk '{v[NR]=$1} END {if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
log "medians over $ROUNDS rounds, data durable: warmd $w, s5cmd $s, transfermanager $tmv GB/s; ceiling (no disk) $c GB/s (data $((total >> 20)) MiB)"
log "medians at tool exit (copiers' data may still be in the page cache): warmd $(median_exit warmd), s5cmd $(median_exit s5cmd), transfermanager $(median_exit tm) GB/s"
printf 'weights: warmd %.2f GB/s, s5cmd %.2f GB/s, ratio %.2f, ceiling %.2f GB/s, peak_rss_mib %d\n' \
  "$w" "$s" "$(awk -v a="$w" -v b="$s" 'BEGIN {print a / b}')" "$c" "$rss"

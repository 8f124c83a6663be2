#!/usr/bin/env bash
# weights.sh is `make bench-weights`: how soon a model's weights are usable on a node when warmd
# prefetches them from S3 (versitygw on loopback), against the tools a skilled user would otherwise
# run, each tuned for this machine:
#   - s5cmd v2.3.0 (the fastest S3 copier; built from the pinned nested module hack/bench-tools/s5cmd),
#     with the best `cp --concurrency/-c` x `--part-size/-p` of a small sweep;
#   - the aws-sdk-go-v2 transfer manager (DownloadDirectory, GetObjectType=GetObjectRanges), with the
#     best Concurrency x PartSizeBytes of a small sweep (hack/bench-tools/s3peer tm);
#   - a ranged-GET-to-io.Discard ceiling (s3peer ceiling): the network-side limit, no disk.
# Data: generated incompressible bytes (AES-CTR keystream), 1 x BIG (4 GiB) + SHARDS x SHARD
# (8 x 512 MiB) + a 2-byte config.json (warmd's layout check wants one; every tool fetches it),
# uploaded THROUGH S3 (s3peer upload: PutObject, or multipart with 64 MiB parts over that, each with
# a FULL_OBJECT CRC64NVME checksum, what current AWS SDKs and CLIs store by default), so every tool
# sees what real uploads carry and warmd verifies the stored CRC64NVME of every file (printed as
# `verify <method>`, taken from warmd's own per-file report; never assumed).
#
# Sweeps: before the timed rounds, each peer's candidate settings run once on a reduced data set
# (1 x BIG/4 + SHARDS/2 x SHARD/2, same shape) and the best by time-to-durable is used in every round;
# the sweep and the choice are logged. warmd runs with its defaults (what a NodeConfig gets), which
# the contract line reports; `warmd-keep` is warmd with weights.pageCache=keep (buffered writes, the
# model left in the page cache as the copiers leave it), measured in the same rounds and logged.
#
# What is timed, per tool and round (the same three for all):
#   exit     the tool's wall time (GNU time), which for warmd includes fallocate, checksum
#            verification and publishing the snapshot;
#   durable  exit + an fsync of every file it wrote (warmd fsyncs before it publishes, so its share is
#            ~0; the copiers exit with their data still dirty in the page cache);
#   loaded   exit + one full sequential read of every file, as loading safetensors does: the figure
#            a vLLM user waits for. warmd writes with O_DIRECT, so its read comes from the disk; the
#            copiers' data is still in the page cache. The read runs after the fsync (a copier's
#            clean cached pages read as fast as dirty ones), so neither figure pays for the other.
# Fairness: rounds rotate which tool starts (round i starts with tool i mod 5), ROUNDS >= 5, medians.
# Between runs only our own files leave the page cache: each destination is fsynced, dropped with
# posix_fadvise(POSIX_FADV_DONTNEED) and deleted (s3peer drop); /proc/sys/vm/drop_caches, a
# machine-wide `sync` and other processes' files are not ours to touch. The source objects stay in
# the page cache for every tool alike, so this measures client + loopback + destination disk, not
# the server's disk. On a VM the host may cache disk reads too: round 1 is logged apart from the
# later rounds' medians. Peak RSS is GNU time's maximum resident set of the warmd process.
# Runs under scripts/with-testenv.sh (WARMD_TEST_S3, _ACCESS_KEY, _SECRET_KEY, _ROOT).
# Last line:
# weights: warmd <X> GB/s, s5cmd <Y> GB/s, ratio <Z>, load_ratio <L>, exit_ratio <E>, ceiling <C> GB/s, peak_rss_mib <R>, verify <method>
# (X, Y, Z: to durable; L and E: warmd/s5cmd to loaded and to exit).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOFLAGS=-buildvcs=false
ROUNDS=${ROUNDS:-5}
BIG=${BIG:-$((4 << 30))}
SHARDS=${SHARDS:-8}
SHARD=${SHARD:-$((512 << 20))}
SWEEP=${SWEEP:-1} # 0: skip the sweeps and use S5CMD_FLAGS / TM_FLAGS as given
: "${WARMD_TEST_S3:?run through scripts/with-testenv.sh (make bench-weights)}"
: "${WARMD_TEST_S3_ROOT:?run through scripts/with-testenv.sh (make bench-weights)}"
log() { echo "bench-weights: $*" >&2; }
[ "$ROUNDS" -ge 5 ] || { log "ROUNDS must be >= 5"; exit 2; }

bucket=weights-bench-$$
sbucket=weights-sweep-$$
work=$(mktemp -d "${TMPDIR:-/tmp}/weights-bench-XXXXXX")
trap 'rm -rf "$work" "${WARMD_TEST_S3_ROOT:?}/$bucket" "${WARMD_TEST_S3_ROOT:?}/$sbucket"' EXIT
total=$((BIG + SHARDS * SHARD + 2))
sbig=$((BIG / 4)) sshards=$(((SHARDS + 1) / 2)) sshard=$((SHARD / 2))
stotal=$((sbig + sshards * sshard + 2))
# source in the store + one destination + the largest generated file before its upload
need_kb=$(((2 * total + BIG) / 1024 + (1 << 20)))
avail=$(df -Pk "$work" | awk 'NR==2 {print $4}')
log "$(df -h "$work" | awk 'NR==2 {print $6": "$4" free"}'); $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM; load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$avail" -lt "$need_kb" ]; then
  log "need $((need_kb >> 20)) GiB free under $work; have $((avail >> 20)) GiB"
  exit 1
fi

# --- tools ---
warmd=${WARMD_BIN:-$PWD/bin/warmd} # make bench-weights builds bin/warmd first
[ -x "$warmd" ] || CGO_ENABLED=1 go build -o "$warmd" ./cmd/warmd
log "building s5cmd v2.3.0 and s3peer"
(cd hack/bench-tools/s5cmd && go build -o "$work/s5cmd" github.com/peak/s5cmd/v2)
go build -o "$work/s3peer" ./hack/bench-tools/s3peer
peer=$work/s3peer
export AWS_ACCESS_KEY_ID=$WARMD_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$WARMD_TEST_S3_SECRET_KEY AWS_REGION=us-east-1

# --- data: incompressible, uploaded through S3 with CRC64NVME; each file deleted once uploaded ---
gen() { (openssl enc -aes-128-ctr -nosalt -pass "pass:$2" </dev/zero 2>/dev/null || true) | head -c "$1"; }
upload() { # upload <bucket> <big> <shards> <shard>
  local g=$work/gen
  log "uploading $((($2 + $3 * $4) >> 20)) MiB of incompressible data to s3://$1 (CRC64NVME, full object)"
  rm -rf "$g" && mkdir -p "$g"
  printf '{}' >"$g/config.json"
  "$peer" upload -endpoint "$WARMD_TEST_S3" -bucket "$1" -src "$g" >/dev/null
  gen "$2" "big$1" >"$g/model-big.bin"
  rm "$g/config.json" && "$peer" upload -endpoint "$WARMD_TEST_S3" -bucket "$1" -src "$g" >/dev/null
  for i in $(seq 0 $(($3 - 1))); do
    rm -f "$g"/* && gen "$4" "shard$i$1" >"$g/model-shard-$i.bin"
    "$peer" upload -endpoint "$WARMD_TEST_S3" -bucket "$1" -src "$g" >/dev/null
  done
  rm -rf "$g"
}
upload "$bucket" "$BIG" "$SHARDS" "$SHARD"

dest=$work/dest
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }
now() { date +%s.%N; }

# measure <tool> <bucket> <bytes> [tool flags...]: one run; sets m_exit m_fsync m_read m_rss (seconds, MiB)
measure() {
  local tool=$1 b=$2 bytes=$3; shift 3
  rm -rf "$dest" && mkdir -p "$dest"
  local cmd
  case $tool in
  warmd) cmd=("$warmd" prefetch weights "s3://$b/" "$dest" --name bench/weights --endpoint "$WARMD_TEST_S3" --progress none -o json) ;;
  warmd-keep) cmd=("$warmd" prefetch weights "s3://$b/" "$dest" --name bench/weights --endpoint "$WARMD_TEST_S3" --progress none -o json --page-cache keep) ;;
  s5cmd) cmd=("$work/s5cmd" --endpoint-url "$WARMD_TEST_S3" cp "$@" "s3://$b/*" "$dest/") ;;
  tm) cmd=("$peer" tm -endpoint "$WARMD_TEST_S3" -bucket "$b" -dest "$dest" "$@") ;;
  ceiling) cmd=("$peer" ceiling -endpoint "$WARMD_TEST_S3" -bucket "$b") ;;
  esac
  if ! /usr/bin/time -f "%e %M" -o "$work/time" "${cmd[@]}" >"$work/out" 2>&1; then
    log "$tool failed:"; cat "$work/out" >&2; exit 1
  fi
  local rss_kb
  read -r m_exit rss_kb <"$work/time"
  m_rss=$((rss_kb / 1024)) m_fsync=0 m_read=0
  [ "$tool" = ceiling ] && return
  local files=$dest t0 got
  [ "${tool%-keep}" = warmd ] && files=$dest/models--bench--weights/snapshots
  t0=$(now) && "$peer" fsync "$dest" >/dev/null && m_fsync=$(secs "$t0" "$(now)")
  t0=$(now) && got=$("$peer" read "$files") && m_read=$(secs "$t0" "$(now)")
  got=$(awk '{print $2}' <<<"$got")
  [ "$got" -eq "$bytes" ] || { log "$tool: read back $got bytes, want $bytes"; cat "$work/out" >&2; exit 1; }
  "$peer" drop "$dest" >/dev/null # only our files leave the page cache
}
gbps() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.3f", b / s / 1e9}'; }

# --- sweeps: each peer's candidates once on the reduced set; the best to-durable wins ---
S5CMD_FLAGS=${S5CMD_FLAGS:-} TM_FLAGS=${TM_FLAGS:-}
if [ "$SWEEP" = 1 ]; then
  upload "$sbucket" "$sbig" "$sshards" "$sshard"
  sweep() { # sweep <tool> <candidate flags>...: prints the best candidate
    local tool=$1 best="" bt=""; shift
    for c in "$@"; do
      # shellcheck disable=SC2086
      measure "$tool" "$sbucket" "$stotal" $c
      local d
      d=$(awk -v a="$m_exit" -v b="$m_fsync" 'BEGIN {printf "%.3f", a + b}')
      log "sweep $tool [$c]: exit ${m_exit}s + fsync ${m_fsync}s = ${d}s durable ($(gbps "$stotal" "$d") GB/s), loaded $(gbps "$stotal" "$(awk -v a="$m_exit" -v b="$m_read" 'BEGIN {print a + b}')") GB/s"
      if [ -z "$bt" ] || awk -v a="$d" -v b="$bt" 'BEGIN {exit !(a < b)}'; then best=$c bt=$d; fi
    done
    echo "$best"
  }
  log "sweep data: 1 x $((sbig >> 20)) MiB + $sshards x $((sshard >> 20)) MiB"
  S5CMD_FLAGS=$(sweep s5cmd "-c 5 -p 50" "-c 16 -p 50" "-c 32 -p 50" "-c 8 -p 16" "-c 16 -p 16" "-c 32 -p 16")
  TM_FLAGS=$(sweep tm "-concurrency 5 -part $((8 << 20))" "-concurrency 8 -part $((8 << 20))" "-concurrency 16 -part $((8 << 20))" \
    "-concurrency 5 -part $((32 << 20))" "-concurrency 8 -part $((32 << 20))" "-concurrency 16 -part $((32 << 20))")
  rm -rf "${WARMD_TEST_S3_ROOT:?}/$sbucket"
fi
log "chosen: s5cmd cp ${S5CMD_FLAGS:-(defaults)}; s3peer tm ${TM_FLAGS:-(defaults)}"

# --- the destination disk's own O_DIRECT write speed (what warmd's writes can reach at best) ---
ddn=$(((BIG >> 24) < 128 ? (BIG >> 24) : 128))
ddout=$(dd if=/dev/zero of="$work/dd" bs=16M count="$ddn" oflag=direct 2>&1 | tail -1)
rm -f "$work/dd"
disk=$(awk -v b=$((ddn << 24)) -v s="$(awk '{for (i = 1; i < NF; i++) if ($(i + 1) == "s,") print $i}' <<<"$ddout")" 'BEGIN {printf "%.3f", b / s / 1e9}')
log "disk: O_DIRECT write of $((ddn << 4)) MiB at $disk GB/s (dd)"

# --- timed rounds ---
results=$work/results
: >"$results"
tools=(warmd s5cmd tm ceiling warmd-keep)
verify=""
for r in $(seq 1 "$ROUNDS"); do
  for k in "${!tools[@]}"; do
    tool=${tools[$(((r - 1 + k) % ${#tools[@]}))]}
    flags=""
    case $tool in s5cmd) flags=$S5CMD_FLAGS ;; tm) flags=$TM_FLAGS ;; esac
    # shellcheck disable=SC2086
    measure "$tool" "$bucket" "$total" $flags
    if [ "$tool" = warmd ] && [ -z "$verify" ]; then
      # How warmd verified each file, from its own report: one method for all, or say which not.
      verify=$(jq -r '[.[0].files[] | if .method == "s3-checksum" then (.digest | split(":")[0] | ascii_downcase) + (if .streamed then "" else "(read back)" end) else .method end] | unique | join("+")' "$work/out")
      [ "$verify" = size ] && verify="size-only (the store gave no checksum or ETag)"
    fi
    d=$(awk -v a="$m_exit" -v b="$m_fsync" 'BEGIN {print a + b}')
    l=$(awk -v a="$m_exit" -v b="$m_read" 'BEGIN {print a + b}')
    if [ "$tool" = ceiling ]; then
      log "round $r ceiling: ${m_exit}s, $(gbps "$total" "$m_exit") GB/s (no disk)"
      echo "$r ceiling $(gbps "$total" "$m_exit") $(gbps "$total" "$m_exit") $(gbps "$total" "$m_exit") $m_rss" >>"$results"
    else
      log "round $r $tool: exit ${m_exit}s, +fsync ${m_fsync}s, +read ${m_read}s: durable $(gbps "$total" "$d"), loaded $(gbps "$total" "$l"), exit $(gbps "$total" "$m_exit") GB/s; max RSS ${m_rss} MiB"
      echo "$r $tool $(gbps "$total" "$d") $(gbps "$total" "$l") $(gbps "$total" "$m_exit") $m_rss" >>"$results"
    fi
  done
done
rm -rf "$dest"

# median <tool> <column: 3 durable, 4 loaded, 5 exit> [first round]
median() { awk -v t="$1" -v c="$2" -v f="${3:-1}" '$2 == t && $1 >= f {print $c}' "$results" | sort -g | awk '{v[NR]=$1} END {if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
round1() { awk -v t="$1" -v c="$2" '$2 == t && $1 == 1 {print $c}' "$results"; }
for c in 3:durable 4:loaded 5:exit; do
  log "medians to ${c#*:} over $ROUNDS rounds: warmd $(median warmd "${c%%:*}"), warmd pageCache=keep $(median warmd-keep "${c%%:*}"), s5cmd $(median s5cmd "${c%%:*}"), transfermanager $(median tm "${c%%:*}") GB/s; rounds 2-$ROUNDS: warmd $(median warmd "${c%%:*}" 2), s5cmd $(median s5cmd "${c%%:*}" 2), tm $(median tm "${c%%:*}" 2); round 1: warmd $(round1 warmd "${c%%:*}"), s5cmd $(round1 s5cmd "${c%%:*}"), tm $(round1 tm "${c%%:*}")"
done
w=$(median warmd 3) s=$(median s5cmd 3) c=$(median ceiling 3)
rss=$(awk '$2 == "warmd" && $6 > m {m=$6} END {print m+0}' "$results")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
log "ceiling (no disk) $c GB/s, disk O_DIRECT $disk GB/s: warmd durable is $(awk -v w="$w" -v c="$c" -v d="$disk" 'BEGIN {m = c < d ? c : d; printf "%.0f", 100 * w / m}')% of min(ceiling, disk); data $((total >> 20)) MiB"
printf 'weights: warmd %.2f GB/s, s5cmd %.2f GB/s, ratio %s, load_ratio %s, exit_ratio %s, ceiling %.2f GB/s, peak_rss_mib %d, verify %s\n' \
  "$w" "$s" "$(ratio "$w" "$s")" "$(ratio "$(median warmd 4)" "$(median s5cmd 4)")" "$(ratio "$(median warmd 5)" "$(median s5cmd 5)")" "$c" "$rss" "$verify"

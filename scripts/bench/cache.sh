#!/usr/bin/env bash
# cache.sh: compile-cache capture+upload and download+restore, warmd vs the tar+zstd pipelines a user
# would otherwise script, through two S3 clients (Python awscli and s5cmd v2.3.0, built from the pinned
# nested module hack/bench-tools/s5cmd), against the test versitygw (run through
# scripts/with-testenv.sh, as `make bench-cache` does).
#
# Tree: a generated cache shaped like Triton/FlashInfer/vLLM caches, ~2 GiB in ~20,000 files (many
# small files, 48 FlashInfer .so of 10-50 MiB; incompressible data), pkg/cache/cachetest.Bench.
#   (a) capture+upload: `warmd cache push` (capture complete files into content-addressed bundles,
#       upload them, publish the index) vs `tar -I 'zstd -1 -T0' -cf - . | aws s3 cp - s3://…` and
#       vs the same tar into `s5cmd pipe s3://…`
#   (b) download+restore: `warmd cache pull` (index, parallel downloads, sha256 + manifest checks,
#       safe extraction with temp+rename and a file-system flush) vs `aws s3 cp s3://… - | tar -I zstd -xf -`
#       and vs `s5cmd cat s3://… | tar -I zstd -xf -` (both read the same archive)
# Same compression on both sides: warmd's bundle writer (pkg/cache/bundle/writer.go) uses
# klauspost/compress zstd SpeedFastest, which that library documents as the fastest zstd mode and
# maps from zstd levels 1-2 (EncoderLevelFromZstd); the peers use `zstd -1`, all cores (-T0).
# Rounds rotate which tool goes first; `sync` runs before each timed command so none pays for
# another's dirty pages. Prints medians; the summary's tar+zstd figures are the best peer pipeline's
# (the faster median of awscli and s5cmd, named in the log). The last line is the summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${WARMD_TEST_S3:?run through scripts/with-testenv.sh (make bench-cache)}"
ROUNDS=${ROUNDS:-3}
SPEC=${SPEC:-bench} # the generated tree: bench (~2 GiB) or small (for trying the script)
SKU=nvidia-h200.sm90.cuda13.0.drv580-bench000
AWS=/usr/bin/aws

log() { echo "bench-cache: $*" >&2; }

if [ ! -x "$AWS" ] || ! command -v zstd >/dev/null; then
  log "installing awscli and zstd"
  apt-get install -y awscli zstd >/dev/null
fi
avail=$(df -Pk /tmp | awk 'NR==2{print $4}')
if [ "$avail" -lt $((16 * 1024 * 1024)) ]; then
  log "need 16 GiB free under /tmp, have $((avail / 1024 / 1024)) GiB"; exit 1
fi

work=$(mktemp -d /tmp/cache-bench-XXXXXX)
bucket=cache-bench-$RANDOM
cleanup() { rm -rf "$work" "${WARMD_TEST_S3_ROOT:?}/$bucket"; }
trap cleanup EXIT
mkdir "$WARMD_TEST_S3_ROOT/$bucket"

warmd=$PWD/bin/warmd
[ -x "$warmd" ] || GOFLAGS=-buildvcs=false CGO_ENABLED=1 go build -o "$warmd" ./cmd/warmd
GOFLAGS=-buildvcs=false go build -o "$work/gen" ./pkg/cache/cachetest/gen
log "building s5cmd v2.3.0"
(cd hack/bench-tools/s5cmd && GOFLAGS=-buildvcs=false go build -o "$work/s5cmd" github.com/peak/s5cmd/v2)

src=$work/src                       # a node's data dir; the tree is its SKU tree
tree=$src/compile-cache/$SKU
mkdir -p "$tree"
log "generating the cache tree"
nfiles=$("$work/gen" -out "$tree" -spec "$SPEC")
log "tree: $nfiles files, $(du -sh "$tree" | cut -f1)"

export AWS_ACCESS_KEY_ID=$WARMD_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$WARMD_TEST_S3_SECRET_KEY
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
# The test server is plain http on loopback: the CA bundle is irrelevant, and awscli fails on it.
aws() { env -u AWS_CA_BUNDLE "$AWS" --endpoint-url "$WARMD_TEST_S3" "$@"; }
s5cmd() { "$work/s5cmd" --endpoint-url "$WARMD_TEST_S3" "$@"; }

cfg() { # cfg <prefix>: a NodeConfig pointing compile caches at s3://bucket/<prefix>
  cat >"$work/cfg-$1.yaml" <<YAML
apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: bench
dataDir: $src
s3:
  endpoint: $WARMD_TEST_S3
compileCache:
  remote: s3://$bucket/$1
YAML
  echo "$work/cfg-$1.yaml"
}

timeit() { # timeit <var> <command...>: run the command, store wall seconds in <var>
  local __v=$1; shift
  sync
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log" >&2; return 1; }
  t1=$(date +%s.%N)
  printf -v "$__v" '%.3f' "$(echo "$t1 - $t0" | bc)"
}

warmd_capture() { # round
  rm -rf "$src/compile-cache/.bundles"
  "$warmd" cache push --config "$(cfg "w$1")" --sku "$SKU"
}
ZSTD="zstd -1 -T0" # the level warmd's bundle writer uses (see the header)
tar_capture() { # awscli
  tar -C "$tree" -I "$ZSTD" -cf - . | aws s3 cp - "s3://$bucket/t$1/cache.tar.zst"
}
s5_capture() {
  tar -C "$tree" -I "$ZSTD" -cf - . | s5cmd pipe "s3://$bucket/s$1/cache.tar.zst"
}
warmd_restore() { # round [flags]: restore round 1's upload into a fresh data dir
  local dst=$work/dst-w$1; shift
  rm -rf "$dst"
  "$warmd" cache pull --config "$(cfg w1)" --data-dir "$dst" --sku "$SKU" "$@"
}
tar_restore() { # awscli
  local dst=$work/dst-t$1
  rm -rf "$dst"; mkdir -p "$dst"
  aws s3 cp "s3://$bucket/t1/cache.tar.zst" - | tar -C "$dst" -I zstd -xf -
}
s5_restore() {
  local dst=$work/dst-s$1
  rm -rf "$dst"; mkdir -p "$dst"
  s5cmd cat "s3://$bucket/t1/cache.tar.zst" | tar -C "$dst" -I zstd -xf -
}

declare -a cw ct cs rw rs rt r5
for ((r = 1; r <= ROUNDS; r++)); do
  steps=("a warmd_capture" "b tar_capture" "d s5_capture")
  for ((k = 0; k < 3; k++)); do
    # shellcheck disable=SC2086
    timeit ${steps[$(((r - 1 + k) % 3))]} "$r"
  done
  cw+=("$a"); ct+=("$b"); cs+=("$d")
  log "round $r capture: warmd ${a}s, tar+zstd+awscli ${b}s, tar+zstd+s5cmd ${d}s"
  # Keep only round 1's uploads (the restore source); drop later rounds' copies to save disk.
  rm -rf "${WARMD_TEST_S3_ROOT:?}/$bucket/s$r"
  if ((r > 1)); then rm -rf "${WARMD_TEST_S3_ROOT:?}/$bucket/w$r" "${WARMD_TEST_S3_ROOT:?}/$bucket/t$r"; fi
done
# warmd's default flushes the file system before renaming restored files into place (power-loss
# safety); the tar pipeline flushes nothing. The summary compares like with like (--no-sync); the
# flushing default is measured in the same rounds and reported on its own line.
for ((r = 1; r <= ROUNDS; r++)); do
  steps=("a warmd_restore $r --no-sync" "b tar_restore $r" "d s5_restore $r" "c warmd_restore s$r")
  for ((k = 0; k < 4; k++)); do
    # shellcheck disable=SC2086
    timeit ${steps[$(((r - 1 + k) % 4))]}
  done
  rw+=("$a"); rt+=("$b"); r5+=("$d"); rs+=("$c")
  log "round $r restore: warmd ${a}s, tar+zstd+awscli ${b}s, s5cmd+tar+zstd ${d}s, warmd with flush ${c}s"
  if ((r == 1)); then
    # Same files, same bytes: compare the restored trees against the source once (untimed).
    (cd "$tree" && find . -type f ! -name '*.lock' ! -name '*.log' -print0 | sort -z | xargs -0 sha256sum) >"$work/src.sums"
    (cd "$work/dst-w1/compile-cache/$SKU" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$work/w.sums"
    if ! cmp -s "$work/src.sums" "$work/w.sums"; then
      log "warmd's restored tree differs from the source"; diff "$work/src.sums" "$work/w.sums" | head >&2; exit 1
    fi
    log "restored tree verified: $(wc -l <"$work/w.sums") files identical to the source"
  fi
  rm -rf "$work/dst-w$r" "$work/dst-ws$r" "$work/dst-t$r" "$work/dst-s$r"
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
mcw=$(median "${cw[@]}"); mrw=$(median "${rw[@]}")
log "capture+upload rounds: warmd ${cw[*]}; tar+zstd+awscli ${ct[*]}; tar+zstd+s5cmd ${cs[*]}"
log "download+restore rounds: warmd ${rw[*]}; awscli+tar+zstd ${rt[*]}; s5cmd+tar+zstd ${r5[*]}; warmd with flush ${rs[*]}"
best() { # best <name> <median> <name> <median>: the faster pipeline's "median name"
  if awk -v a="$2" -v b="$4" 'BEGIN {exit !(a <= b)}'; then echo "$2 $1"; else echo "$4 $3"; fi
}
read -r mct cpeer < <(best "tar+zstd+awscli" "$(median "${ct[@]}")" "tar+zstd+s5cmd" "$(median "${cs[@]}")")
read -r mrt rpeer < <(best "awscli+tar+zstd" "$(median "${rt[@]}")" "s5cmd+tar+zstd" "$(median "${r5[@]}")")
log "medians: capture awscli $(median "${ct[@]}")s, s5cmd $(median "${cs[@]}")s; restore awscli $(median "${rt[@]}")s, s5cmd $(median "${r5[@]}")s"
log "best peer pipeline (the summary's tar+zstd): capture $cpeer ${mct}s, restore $rpeer ${mrt}s"
mrs=$(median "${rs[@]}")
printf 'cache: restore with file-system flush (warmd default) %.2fs, speedup %.2f over tar+zstd (which does not flush)\n' \
  "$mrs" "$(echo "$mrt / $mrs" | bc -l)"
printf 'cache: restore warmd %.2fs, tar+zstd %.2fs, speedup %.2f, capture warmd %.2fs, tar+zstd %.2fs\n' \
  "$mrw" "$mrt" "$(echo "$mrt / $mrw" | bc -l)" "$mcw" "$mct"

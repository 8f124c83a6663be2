#!/usr/bin/env bash
# image.sh is `make image`: warmd's multi-arch OCI image (linux/amd64 + linux/arm64) without a
# container engine.
#   1. tools: Debian's cross compiler for the foreign architecture and qemu-user-static (apt, once);
#   2. the foreign architecture's glibc: Debian's libc6 package of the same version as the build
#      machine's, fetched with apt into a private state dir (never the machine's apt config) and
#      unpacked into a cached sysroot (the cross toolchain's own libc is older than the archive's
#      security updates, so it is only linked against, never shipped);
#   3. the cgo warmd binary per architecture (-trimpath, stripped; the Go build cache makes a rebuild
#      take seconds; a cold arm64 cross-compile takes minutes);
#   4. hack/imagebuild writes the OCI layout (OUT, default _output/image) and pushes it to IMAGE when
#      set (plain HTTP for loopback registries), then runs each platform's binary in a chroot holding
#      only the image (arm64 under qemu-user).
# Environment: IMAGE=registry/repo:tag to push, VERSION (default: git describe), OUT, SOURCE.
# The last line is: image: <IMAGE or layout dir> platforms linux/amd64,linux/arm64 digest sha256:<digest>
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false
start=$(date +%s)
log() { echo "image: $*" >&2; }

VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# Every timestamp in the image is the commit's, so the same commit gives the same digest.
CREATED=$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)
SOURCE=${SOURCE:-https://github.com/warmd/warmd}
OUT=${OUT:-_output/image}
IMAGE=${IMAGE:-}
PLATFORMS=(linux/amd64 linux/arm64)
cache=${WARMD_IMAGE_CACHE:-$HOME/.cache/warmd-image}
# go-nvml's header marks functions deprecated that its bindings still wrap: silence that one warning
# class (the flag reaches only the build's cgo packages: runtime/cgo, net, os/user and go-nvml).
: "${CGO_CFLAGS:=-O2 -g -Wno-deprecated-declarations}"
export CGO_CFLAGS

hostarch=$(go env GOHOSTARCH)
triplet() { case $1 in amd64) echo x86_64-linux-gnu ;; arm64) echo aarch64-linux-gnu ;; *) log "unsupported arch $1"; exit 2 ;; esac; }
debarch() { echo "$1"; } # Debian and Go name amd64 and arm64 alike

# shellcheck source=scripts/apt.sh
. scripts/apt.sh

# sysroot <arch>: print a directory holding Debian's libc6 for arch (unpacked, with the dpkg status
# and file list imagebuild reads), cached by version.
sysroot() {
  local arch=$1 ver dir st tmp deb
  ver=$(dpkg-query -W -f='${Version}' "libc6:$hostarch")
  dir=$cache/sysroot/$arch-$ver
  if [ -f "$dir/var/lib/dpkg/status" ]; then echo "$dir"; return; fi
  st=$cache/apt-$arch
  mkdir -p "$st/lists/partial" "$st/cache/archives/partial" "$cache/sysroot" "$cache/debs"
  : >"$st/status"
  local apt=(apt-get -q -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "Dir::State::Lists=$st/lists"
    -o "Dir::Cache=$st/cache" -o "Dir::State::status=$st/status")
  deb=$(ls "$cache/debs/libc6_${ver//:/%3a}_$arch.deb" 2>/dev/null || true)
  if [ -z "$deb" ]; then
    log "fetching Debian libc6:$arch $ver (apt, private state under $st)"
    "${apt[@]}" update >/dev/null
    tmp=$(mktemp -d "$cache/debs/.dl-XXXXXX")
    if ! (cd "$tmp" && "${apt[@]}" download "libc6:$arch=$ver" >/dev/null 2>&1); then
      log "libc6:$arch $ver is not in the archive; using the newest libc6:$arch"
      (cd "$tmp" && "${apt[@]}" download "libc6:$arch" >/dev/null 2>&1)
    fi
    deb=$(ls "$tmp"/libc6_*.deb)
    mv "$deb" "$cache/debs/" && rm -rf "$tmp"
    deb=$cache/debs/$(basename "$deb")
  fi
  tmp=$(mktemp -d "$cache/sysroot/.x-XXXXXX")
  dpkg-deb -x "$deb" "$tmp"
  mkdir -p "$tmp/var/lib/dpkg/info"
  { dpkg-deb -f "$deb"; echo "Status: install ok installed"; } >"$tmp/var/lib/dpkg/status"
  dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|; s|/$||; s|^$|/.|' >"$tmp/var/lib/dpkg/info/libc6:$arch.list"
  rm -rf "$dir" && mv "$tmp" "$dir"
  echo "$dir"
}

# 1. tools
need=(qemu-user-static ca-certificates)
for p in "${PLATFORMS[@]}"; do
  a=${p#linux/}
  [ "$a" = "$hostarch" ] && continue
  t=$(triplet "$a")
  need+=("gcc-${t//_/-}" "libc6-dev-$(debarch "$a")-cross")
done
apt_install "${need[@]}"

# 2 + 3. binaries (and foreign sysroots)
args=()
for p in "${PLATFORMS[@]}"; do
  a=${p#linux/}
  bin=_output/bin/linux_$a/warmd
  cc=gcc
  if [ "$a" != "$hostarch" ]; then
    cc=$(triplet "$a")-gcc
    args+=(--sysroot "$p=$(sysroot "$a")")
  fi
  t0=$(date +%s)
  log "building $p binary (CC=$cc; cached: seconds, cold: minutes)"
  CGO_ENABLED=1 GOOS=linux GOARCH=$a CC=$cc go build -trimpath \
    -ldflags "-s -w -X warmd.io/warmd/pkg/version.Version=$VERSION" -o "$bin" ./cmd/warmd
  log "$p binary: $(($(date +%s) - t0))s, $(du -m "$bin" | cut -f1) MiB"
  args+=(--binary "$p=$bin")
done

# 4. image, push, verify
go build -o _output/bin/imagebuild ./hack/imagebuild
push=()
[ -n "$IMAGE" ] && push=(--push "$IMAGE")
summary=$(_output/bin/imagebuild build --out "$OUT" --tag "$VERSION" --version "$VERSION" --revision "$REVISION" \
  --source "$SOURCE" --created "$CREATED" "${args[@]}" "${push[@]}")
_output/bin/imagebuild verify --layout "$OUT" --version "$VERSION" --platforms "$(IFS=,; echo "${PLATFORMS[*]}")"
log "done in $(($(date +%s) - start))s (layout $OUT, tag $VERSION)"
echo "$summary"

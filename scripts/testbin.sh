#!/usr/bin/env bash
# testbin.sh builds (once per machine, keyed by the pins) every real service binary the tests run:
#   containerd 2.4.2 + ctr + shim   (from warmd's own go.mod tool block: same version as the client library)
#   versitygw v1.8.0                (S3 server, posix backend)
#   kube-apiserver v1.37.2, etcd v3.6.16 (nested wrapper modules under hack/k8s-testbin, so k8s.io/kubernetes
#                                    never enters warmd's go.mod)
# and installs Debian's containerd 1.6.20 + runc and docker-registry when apt can.
# It prints the directory holding the binaries on its last line. Builds go to a temp dir that is renamed
# into place, so a half-built set is never used.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false

VERSITYGW_VERSION=v1.8.0
# Key the cache by what decides the binaries: the containerd pin in go.mod, the wrapper modules, this script.
pins=$( { grep -E 'containerd/containerd/v2 |^go ' go.mod; cat hack/k8s-testbin/*/go.mod hack/k8s-testbin/*/go.sum scripts/testbin.sh; } | sha256sum | cut -c1-16)
cache=${WARMD_TESTBIN_CACHE:-$HOME/.cache/warmd-testbin}
dir=$cache/$pins
log() { echo "testbin: $*" >&2; }

apt_install() {
  local missing=()
  command -v /usr/bin/containerd >/dev/null 2>&1 || missing+=(containerd runc)
  command -v /usr/bin/docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Debian's packages start nothing here (no systemd), but make sure no system daemon is used by accident.
}

if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] && [ -x "$dir/containerd" ] && [ -x "$dir/versitygw" ]; then
  apt_install
  echo "$dir"
  exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

apt_install &
apt_pid=$!

log "building containerd v2.4.2, ctr, containerd-shim-runc-v2 (go.mod tool block)"
CGO_ENABLED=0 go build -o "$tmp/" \
  github.com/containerd/containerd/v2/cmd/containerd \
  github.com/containerd/containerd/v2/cmd/ctr \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2

log "building versitygw $VERSITYGW_VERSION"
GOBIN=$tmp CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
echo "$VERSITYGW_VERSION" >"$tmp/versitygw.version"  # its --version says only "git" when built by go install

log "building etcd v3.6.16 (hack/k8s-testbin/etcd)"
(cd hack/k8s-testbin/etcd && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)

log "building kube-apiserver v1.37.2 (hack/k8s-testbin/apiserver)"
(cd hack/k8s-testbin/apiserver && CGO_ENABLED=0 go build -ldflags "-s -w \
  -X k8s.io/component-base/version.gitVersion=v1.37.2 \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
  -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)

wait "$apt_pid"
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
log "built in $(( $(date +%s) - start ))s into $dir"
echo "$dir"

#!/usr/bin/env bash
# testbin.sh builds (once per machine, keyed by the pins) the real service binaries warmd's tests and
# demo run, and installs the Debian ones:
#   containerd  containerd 2.4.2 + ctr + shim, from warmd's own go.mod tool block (same version as the
#               client library)
#   versitygw   versitygw v1.8.0 (S3 server, posix backend)
#   kube        kube-apiserver v1.37.2 and etcd v3.6.16, from nested wrapper modules under
#               hack/k8s-testbin (k8s.io/kubernetes never enters warmd's go.mod)
#   debian      Debian's containerd 1.6.20 + runc, docker-registry (distribution 2.8.2)
# Usage: testbin.sh [component...]   (default: all). Prints the binary dir on its last line.
# Each binary is built into a temp dir and renamed into place, so a half-built one is never used.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false

VERSITYGW_VERSION=v1.8.0
# Key the cache by what decides the binaries: the containerd pin in go.mod, the wrapper modules, this script.
pins=$( { grep -E 'containerd/containerd/v2 |^go ' go.mod; cat hack/k8s-testbin/*/go.mod hack/k8s-testbin/*/go.sum scripts/testbin.sh; } | sha256sum | cut -c1-16)
cache=${WARMD_TESTBIN_CACHE:-$HOME/.cache/warmd-testbin}
dir=$cache/$pins
log() { echo "testbin: $*" >&2; }
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(debian containerd versitygw kube)
mkdir -p "$dir"

debian() {
  local missing=()
  [ -x /usr/bin/containerd ] || missing+=(containerd runc)
  [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# publish <tmpdir>: move every built file into the cache dir, each with an atomic rename.
publish() {
  local f
  for f in "$1"/*; do mv -f "$f" "$dir/"; done
  rm -rf "$1"
}

build() { # build <component>
  local tmp start
  tmp=$(mktemp -d "$cache/.build-XXXXXX")
  start=$(date +%s)
  case $1 in
  containerd)
    [ -x "$dir/containerd" ] && [ -x "$dir/ctr" ] && [ -x "$dir/containerd-shim-runc-v2" ] && { rm -rf "$tmp"; return; }
    log "building containerd v2.4.2, ctr, containerd-shim-runc-v2 (go.mod tool block)"
    CGO_ENABLED=0 go build -o "$tmp/" \
      github.com/containerd/containerd/v2/cmd/containerd \
      github.com/containerd/containerd/v2/cmd/ctr \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
    ;;
  versitygw)
    [ -x "$dir/versitygw" ] && { rm -rf "$tmp"; return; }
    log "building versitygw $VERSITYGW_VERSION"
    GOBIN=$tmp CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
    echo "$VERSITYGW_VERSION" >"$tmp/versitygw.version" # its --version says only "git" when built by go install
    ;;
  kube)
    [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] && { rm -rf "$tmp"; return; }
    log "building etcd v3.6.16 (hack/k8s-testbin/etcd)"
    (cd hack/k8s-testbin/etcd && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
    log "building kube-apiserver v1.37.2 (hack/k8s-testbin/apiserver)"
    (cd hack/k8s-testbin/apiserver && CGO_ENABLED=0 go build -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=v1.37.2 \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37" \
      -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
    ;;
  *)
    rm -rf "$tmp"
    log "unknown component $1 (want debian, containerd, versitygw or kube)"
    return 2
    ;;
  esac
  publish "$tmp"
  log "$1 built in $(($(date +%s) - start))s"
}

for c in "${want[@]}"; do
  if [ "$c" = debian ]; then debian; else build "$c"; fi
done
echo "$dir"

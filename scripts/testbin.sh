#!/usr/bin/env bash
# testbin.sh builds (once per machine, each component keyed by its own pins) the real service binaries
# warmd's tests and demo run, and installs the Debian ones:
#   containerd  containerd 2.4.2 + ctr + shim, from warmd's own go.mod tool block (same version as the
#               client library)
#   versitygw   versitygw v1.8.0 (S3 server, posix backend)
#   kube        kube-apiserver v1.37.2 and etcd v3.6.16, from nested wrapper modules under
#               hack/k8s-testbin (k8s.io/kubernetes never enters warmd's go.mod)
#   cluster     kubelet, kube-scheduler and kube-controller-manager v1.37.2 (hack/k8s-testbin/{kubelet,
#               scheduler,controller-manager}) and the pause image (hack/pause) for the one-node cluster
#               scripts/cluster/up.sh starts
#   debian      Debian's containerd 1.6.20 + runc, docker-registry (distribution 2.8.2), and the CNI
#               plugins (containernetworking-plugins) the cluster's pods use
# Usage: testbin.sh [component...]   (default: all). Prints the binary dir on its last line.
# Each component is built into its own cache dir, keyed by its build function and its inputs (so editing
# one component does not rebuild the others), into a temp dir renamed into place, so a half-built one is
# never used; the printed dir holds hard links to every component's files.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false

VERSITYGW_VERSION=v1.8.0
K8S_VERSION=v1.37.2
PAUSE_IMAGE=localhost/warmd-test/pause:v1 # scripts/cluster/up.sh names it as containerd's sandbox image
cache=${WARMD_TESTBIN_CACHE:-$HOME/.cache/warmd-testbin}
log() { echo "testbin: $*" >&2; }
want=("$@")
all=(debian containerd versitygw kube cluster)
[ ${#want[@]} -eq 0 ] && want=("${all[@]}")

debian() {
  local missing=()
  [ -x /usr/bin/containerd ] || missing+=(containerd runc)
  [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
  missing+=($(debian_cluster))
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# debian_cluster prints the Debian packages the one-node cluster needs that are missing: the CNI
# plugins (bridge, host-local, loopback) in /usr/lib/cni.
debian_cluster() {
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] || echo containernetworking-plugins
}

# Each build_<component> builds into $1 (a temp dir) and is the first half of its cache key; inputs_<component>
# prints the rest (the pins and sources that decide its files). files_<component> names what it produces.

inputs_containerd() { grep -E 'containerd/containerd/v2 |^go ' go.mod; }
files_containerd() { echo containerd ctr containerd-shim-runc-v2; }
build_containerd() {
  log "building containerd v2.4.2, ctr, containerd-shim-runc-v2 (go.mod tool block)"
  CGO_ENABLED=0 go build -o "$1/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/ctr \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
}

inputs_versitygw() { echo "$VERSITYGW_VERSION"; }
files_versitygw() { echo versitygw versitygw.version; }
build_versitygw() {
  log "building versitygw $VERSITYGW_VERSION"
  GOBIN=$1 CGO_ENABLED=0 go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "$VERSITYGW_VERSION" >"$1/versitygw.version" # its --version says only "git" when built by go install
}

inputs_kube() { declare -f k8s_build; cat hack/k8s-testbin/apiserver/go.mod hack/k8s-testbin/apiserver/go.sum hack/k8s-testbin/etcd/go.mod hack/k8s-testbin/etcd/go.sum; }
files_kube() { echo kube-apiserver etcd; }
build_kube() {
  log "building etcd v3.6.16 (hack/k8s-testbin/etcd)"
  (cd hack/k8s-testbin/etcd && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3)
  k8s_build apiserver kube-apiserver "$1"
}

# --- the one-node cluster (scripts/cluster/up.sh) ---

# k8s_build <wrapper dir under hack/k8s-testbin> <command> <out dir>: one Kubernetes command at K8S_VERSION,
# with the version stamped the way Kubernetes' own build does (so --version and the Node's kubeletVersion
# say v1.37.2). Statically linked, as the upstream release binaries are.
k8s_build() {
  log "building $2 $K8S_VERSION (hack/k8s-testbin/$1)"
  (cd "hack/k8s-testbin/$1" && CGO_ENABLED=0 go build -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
    -X k8s.io/component-base/version.gitTreeState=clean" \
    -o "$3/$2" "k8s.io/kubernetes/cmd/$2")
}

inputs_cluster() {
  local d
  declare -f k8s_build
  for d in kubelet scheduler controller-manager; do cat "hack/k8s-testbin/$d/go.mod" "hack/k8s-testbin/$d/go.sum"; done
  grep -E 'go-containerregistry |^go ' go.mod
  cat hack/pause/*.go hack/pause/*/*.go
  echo "$PAUSE_IMAGE"
}
files_cluster() { echo kubelet kube-scheduler kube-controller-manager pause.tar; }
build_cluster() {
  k8s_build kubelet kubelet "$1"
  k8s_build scheduler kube-scheduler "$1"
  k8s_build controller-manager kube-controller-manager "$1"
  log "building the pause image (hack/pause)"
  CGO_ENABLED=0 go build -ldflags "-s -w" -o "$1/pause" ./hack/pause
  go run ./hack/pause/mkimage -bin "$1/pause" -ref "$PAUSE_IMAGE" -o "$1/pause.tar"
  rm -f "$1/pause"
}

# key <component>: what decides its files (its build function, its inputs, the Go toolchain).
key() { { declare -f "build_$1"; "inputs_$1"; go env GOVERSION; } | sha256sum | cut -c1-16; }

# build <component>: build it unless its cache dir already holds every file; print that dir.
build() {
  local part tmp start f have=1
  part=$cache/parts/$1-$(key "$1")
  for f in $("files_$1"); do [ -e "$part/$f" ] || have=0; done
  if [ $have = 0 ]; then
    mkdir -p "$cache/parts"
    tmp=$(mktemp -d "$cache/.build-XXXXXX")
    start=$(date +%s)
    if ! "build_$1" "$tmp"; then rm -rf "$tmp"; return 1; fi
    for f in $("files_$1"); do
      [ -e "$tmp/$f" ] || { log "$1: $f was not built"; rm -rf "$tmp"; return 1; }
    done
    rm -rf "$part" # an incomplete one (its files were checked above)
    # One rename: the dir is whole or absent. If a concurrent run published it first, keep that one.
    mv -T "$tmp" "$part" 2>/dev/null || rm -rf "$tmp"
    log "$1 built in $(($(date +%s) - start))s"
  fi
  echo "$part"
}

# The printed dir: hard links to each component's files, keyed by every component's key, so consumers see
# one dir (KUBEBUILDER_ASSETS, WARMD_TEST_BIN) and /proc/PID/exe of a service names a path in it.
keys=""
for c in "${all[@]}"; do [ "$c" = debian ] || keys+="$c=$(key "$c") "; done
dir=$cache/bin-$(echo "$keys" | sha256sum | cut -c1-16)
mkdir -p "$dir"
for c in "${want[@]}"; do
  case $c in
  debian) debian ;;
  containerd | versitygw | kube | cluster)
    part=$(build "$c")
    for f in $("files_$c"); do
      [ "$part/$f" -ef "$dir/$f" ] && continue
      ln -f "$part/$f" "$dir/.$f.tmp" && mv -f "$dir/.$f.tmp" "$dir/$f"
    done
    ;;
  *)
    log "unknown component $c (want ${all[*]})"
    exit 2
    ;;
  esac
done
echo "$dir"

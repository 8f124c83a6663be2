#!/usr/bin/env bash
# tools.sh installs the tools the shipping tests need (chart, image, monitoring), beside testbin.sh's
# services and cached the same way (keyed by the pins, built into a temp dir and renamed into place):
#   helm     helm v4.3.2 from the nested wrapper module hack/tools/helm (helm's dependencies never
#            enter warmd's go.mod); `helm lint` / `helm template` in charts/warmd tests
#   prometheus  Prometheus from the nested wrapper module hack/tools/prometheus (Debian's leaves
#            Kubernetes discovery out): the cluster e2e scrapes the shipped monitors with it and runs
#            KEDA's queries
#   debian   Debian's prometheus (promtool: check rules, check metrics), qemu-user-static (runs the
#            arm64 image binary), gcc-aarch64-linux-gnu + libc6-dev-arm64-cross (cgo cross-compile)
# Usage: tools.sh [helm|prometheus|debian|env]...   (default: helm prometheus debian, then prints the tool dir)
#        tools.sh env   prints the export lines the tests read (internal/testenv: WARMD_TEST_HELM,
#                       WARMD_TEST_PROMTOOL, WARMD_TEST_PROMETHEUS, WARMD_TEST_QEMU_DIR), building what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS=-buildvcs=false

HELM_VERSION=v4.3.2
# Keyed by what decides the binary (not this whole script, so editing the Debian list rebuilds nothing).
pins=$( { grep -E '^go ' go.mod; echo "$HELM_VERSION"; cat hack/tools/helm/go.mod hack/tools/helm/go.sum; } | sha256sum | cut -c1-16)
cache=${WARMD_TESTBIN_CACHE:-$HOME/.cache/warmd-testbin}
dir=$cache/tools-$pins
prompins=$( { grep -E '^go ' go.mod; cat hack/tools/prometheus/go.mod hack/tools/prometheus/go.sum; } | sha256sum | cut -c1-16)
promdir=$cache/prometheus-$prompins
log() { echo "tools: $*" >&2; }
mkdir -p "$dir"

# shellcheck source=scripts/apt.sh
. scripts/apt.sh
debian() { apt_install prometheus qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross; }

helm() {
  [ -x "$dir/helm" ] && return 0
  local tmp start
  tmp=$(mktemp -d "$cache/.build-XXXXXX")
  start=$(date +%s)
  log "building helm $HELM_VERSION (hack/tools/helm)"
  (cd hack/tools/helm && CGO_ENABLED=0 go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    -o "$tmp/helm" helm.sh/helm/v4/cmd/helm)
  mv -f "$tmp/helm" "$dir/helm"
  rm -rf "$tmp"
  log "helm built in $(($(date +%s) - start))s"
}

prometheus() {
  [ -x "$promdir/prometheus" ] && return 0
  local tmp start version
  mkdir -p "$promdir"
  tmp=$(mktemp -d "$cache/.build-XXXXXX")
  start=$(date +%s)
  version=$(awk '$1 == "github.com/prometheus/prometheus" {print $2}' hack/tools/prometheus/go.mod)
  log "building prometheus $version (hack/tools/prometheus; cold: minutes)"
  (cd hack/tools/prometheus && CGO_ENABLED=0 go build -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
    -o "$tmp/prometheus" github.com/prometheus/prometheus/cmd/prometheus)
  mv -f "$tmp/prometheus" "$promdir/prometheus"
  rm -rf "$tmp"
  log "prometheus built in $(($(date +%s) - start))s"
}

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(helm prometheus debian)
for c in "${want[@]}"; do
  case $c in
  helm) helm ;;
  prometheus) prometheus ;;
  debian) debian ;;
  env)
    helm
    prometheus
    debian
    echo "export WARMD_TEST_HELM=$dir/helm"
    echo "export WARMD_TEST_PROMTOOL=$(command -v promtool)"
    echo "export WARMD_TEST_PROMETHEUS=$promdir/prometheus"
    echo "export WARMD_TEST_QEMU_DIR=$(dirname "$(command -v qemu-aarch64-static)")"
    exit 0
    ;;
  *)
    log "unknown component $c (want helm, prometheus, debian or env)"
    exit 2
    ;;
  esac
done
echo "$dir"

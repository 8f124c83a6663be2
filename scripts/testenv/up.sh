#!/usr/bin/env bash
# up.sh starts the real services warmd's tests talk to, each with its own config, root, state and
# socket under one short temp dir, on loopback only:
#   containerd 2.4.2 (primary), Debian containerd 1.6.20 (compatibility), versitygw (S3), and
#   Debian's docker-registry (for shell e2e; Go tests run go-containerregistry's registry in-process).
# kube-apiserver + etcd are started per test package by envtest from KUBEBUILDER_ASSETS.
# It writes an env file (sourced by the Makefile) and records every PID so down.sh stops them.
# Usage: up.sh <bindir> <envfile>
set -euo pipefail
bin=$1
envfile=$2
root=$(mktemp -d /tmp/wdt-XXXXXX)   # short: unix socket paths must stay under 104 characters
pids=$root/pids
: >"$pids"
# Written now so that down.sh can stop what was started even if a service below fails to come up;
# the full file replaces it at the end.
echo "export WARMD_TESTENV_DIR=$root" >"$envfile"
log() { echo "testenv: $*" >&2; }

# Ports come from below the kernel's ephemeral range where there is room: a port in that range that
# nothing listens on can still be the local end of some outgoing connection, and the bind then fails
# ("address already in use"; seen once when a test run had just closed hundreds of connections).
eph_lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() { # a random loopback port nothing listens on
  local p lo=20000 span=40000
  [ "$eph_lo" -gt $((lo + 2000)) ] && span=$((eph_lo - lo))
  while :; do
    p=$((lo + RANDOM % span))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

wait_for() { # wait_for <what> <seconds> <command...>
  local what=$1 secs=$2; shift 2
  local i
  for ((i = 0; i < secs * 10; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  log "$what did not come up in ${secs}s; its log:"
  cat "$root/$what.log" >&2 || true
  return 1
}

# --- containerd 2.4.2 (built from our go.mod's tool block) ---
c2=$root/c2
mkdir -p "$c2/certs.d"
cat >"$c2/config.toml" <<TOML
version = 3
root = "$c2/root"
state = "$c2/state"
[grpc]
  address = "$c2/sock"
[ttrpc]
  address = "$c2/sock.ttrpc"
[plugins."io.containerd.cri.v1.images".registry]
  config_path = "$c2/certs.d"
[plugins."io.containerd.transfer.v1.local"]
  config_path = "$c2/certs.d"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
TOML
# Go's decoder, as on most hosts, even where igzip or unpigz is installed (bench-images installs
# them for its own second daemon): containerd prefers them when they are on its PATH.
CONTAINERD_DISABLE_IGZIP=1 CONTAINERD_DISABLE_PIGZ=1 PATH=$bin:$PATH setsid "$bin/containerd" --config "$c2/config.toml" >"$root/containerd2.log" 2>&1 &
echo $! >>"$pids"
wait_for containerd2 30 "$bin/ctr" --address "$c2/sock" version

# --- containerd 1.6.20 (Debian) ---
c1=$root/c1
mkdir -p "$c1/certs.d"
cat >"$c1/config.toml" <<TOML
version = 2
root = "$c1/root"
state = "$c1/state"
[grpc]
  address = "$c1/sock"
[ttrpc]
  address = "$c1/sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "$c1/certs.d"
TOML
setsid /usr/bin/containerd --config "$c1/config.toml" >"$root/containerd16.log" 2>&1 &
echo $! >>"$pids"
wait_for containerd16 30 /usr/bin/ctr --address "$c1/sock" version

# --- versitygw (S3, posix backend) ---
s3port=$(free_port)
s3dir=$root/s3
mkdir -p "$s3dir"
s3key=warmd-$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n')
s3secret=$(head -c24 /dev/urandom | od -An -tx1 | tr -d ' \n')
ROOT_ACCESS_KEY=$s3key ROOT_SECRET_KEY=$s3secret setsid "$bin/versitygw" --port "127.0.0.1:$s3port" --keep-alive --quiet posix "$s3dir" >"$root/versitygw.log" 2>&1 &
echo $! >>"$pids"
wait_for versitygw 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$s3port"

# --- docker-registry (Debian distribution 2.8.2), for shell e2e ---
regport=$(free_port)
mkdir -p "$root/registry"
cat >"$root/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $root/registry
http:
  addr: 127.0.0.1:$regport
log:
  level: warn
YML
setsid /usr/bin/docker-registry serve "$root/registry.yml" >"$root/registry.log" 2>&1 &
echo $! >>"$pids"
wait_for registry 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$regport"

cat >"$envfile" <<ENV
export WARMD_TESTENV_DIR=$root
export WARMD_TEST_CONTAINERD=$c2/sock
export WARMD_TEST_CONTAINERD16=$c1/sock
export WARMD_TEST_S3=http://127.0.0.1:$s3port
export WARMD_TEST_S3_ACCESS_KEY=$s3key
export WARMD_TEST_S3_SECRET_KEY=$s3secret
export WARMD_TEST_S3_ROOT=$s3dir
export WARMD_TEST_REGISTRY=127.0.0.1:$regport
export KUBEBUILDER_ASSETS=$bin
export WARMD_TEST_BIN=$bin
export TMPDIR=$root/tmp
ENV
mkdir -p "$root/tmp"

log "containerd $("$bin/ctr" --address "$c2/sock" version 2>/dev/null | awk '/Server:/{s=1} s&&/Version:/{print $2; exit}') at $c2/sock"
log "containerd $(/usr/bin/ctr --address "$c1/sock" version 2>/dev/null | awk '/Server:/{s=1} s&&/Version:/{print $2; exit}') at $c1/sock"
log "versitygw $(cat "$bin/versitygw.version" 2>/dev/null || echo unknown) at http://127.0.0.1:$s3port"
log "docker-registry $(/usr/bin/docker-registry --version 2>&1 | awk '{print $3}') at 127.0.0.1:$regport"
log "kube-apiserver $("$bin/kube-apiserver" --version 2>&1) (started per test package by envtest)"
log "etcd $("$bin/etcd" --version 2>&1 | awk '/etcd Version/{print $3}') (started per test package by envtest)"

#!/usr/bin/env bash
# down.sh tears down what up.sh started, whatever state it got to, and leaves nothing behind: the pods'
# processes (killed through the cluster's cgroups), every daemon by PID (kubelet first, kube-apiserver
# before etcd), anything else still in the cluster's mount namespace (containerd's shims), then the
# namespaces (the holder), the veth pair, the cgroup dirs and the temp dir. Safe to run twice.
# Usage: down.sh <envfile>
set -u
envfile=$1
[ -f "$envfile" ] || exit 0
# shellcheck disable=SC1090
. "$envfile"
. "$(dirname "$0")/lib.sh"
[ -n "${WARMD_CLUSTER_DIR:-}" ] && [ -d "$WARMD_CLUSTER_DIR" ] || { rm -f "$envfile"; exit 0; }
t0=$(date +%s)
cg=${WARMD_CLUSTER_CGROUP_ROOT:-}

# cgroup_pids: every process in the cluster's cgroup trees (the pods' containers and sandboxes).
cgroup_pids() {
  [ -n "$cg" ] || return 0
  find /sys/fs/cgroup/*"$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
}

stop kubelet
for p in $(cgroup_pids); do kill -9 "$p" 2>/dev/null; done
# kube-apiserver before etcd; containerd after every pod is gone.
stop_pids $(for n in kube-scheduler kube-controller-manager registry versitygw; do pid_of "$n"; done)
stop kube-apiserver
stop etcd
stop containerd
# Whatever is left in the mount namespace (shims, a daemon restart.sh started and did not record).
if [ -n "${WARMD_CLUSTER_HOLDER:-}" ] && mnt=$(stat -Lc %i "/proc/$WARMD_CLUSTER_HOLDER/ns/mnt" 2>/dev/null) &&
  [ "$mnt" != "$(stat -Lc %i /proc/self/ns/mnt)" ]; then
  for ((i = 0; i < 3; i++)); do
    mapfile -t left < <(stat -Lc '%i %n' /proc/[0-9]*/ns/mnt 2>/dev/null |
      awk -v m="$mnt" -v h="$WARMD_CLUSTER_HOLDER" '$1 == m { split($2, a, "/"); if (a[3] != h) print a[3] }')
    live=()
    for p in "${left[@]}"; do alive "$p" && live+=("$p"); done
    [ ${#live[@]} = 0 ] && break
    kill -9 "${live[@]}" 2>/dev/null
    sleep 0.2
  done
fi
for p in $(cgroup_pids); do kill -9 "$p" 2>/dev/null; done
# The holder last: with it the network namespace (and the veth end in it) and the mount namespace go.
stop holder
[ -n "${WARMD_CLUSTER_VETH:-}" ] && ip link del "$WARMD_CLUSTER_VETH" 2>/dev/null
# cgroup dirs, deepest first (a dir is removable once its processes are gone; retry while they exit).
if [ -n "$cg" ]; then
  for ((i = 0; i < 50; i++)); do
    find /sys/fs/cgroup/*"$cg" -depth -type d -exec rmdir {} + 2>/dev/null
    ls -d /sys/fs/cgroup/*"$cg" >/dev/null 2>&1 || break
    sleep 0.1
  done
  ls -d /sys/fs/cgroup/*"$cg" 2>/dev/null | sed 's/^/cluster: left behind: /' >&2
fi
# Nothing was mounted in the host's mount namespace, but a stale bind would make rm -rf fail.
grep -o " $WARMD_CLUSTER_DIR[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
rm -rf "$WARMD_CLUSTER_DIR"
[ "$envfile" != "$WARMD_CLUSTER_DIR/state" ] && rm -f "$envfile"
log "torn down in $(($(date +%s) - t0))s"
exit 0

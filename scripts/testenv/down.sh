#!/usr/bin/env bash
# down.sh stops what up.sh started (by PID), and any kube-apiserver/etcd that envtest left behind
# when a test binary was killed (their executable is in the test bin dir and their data under this
# run's TMPDIR).
# Usage: down.sh <envfile>
set -u
envfile=$1
[ -f "$envfile" ] || exit 0
# shellcheck disable=SC1090
. "$envfile"
stop_pids() {
  local p
  for p in "$@"; do kill "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return
    sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2>/dev/null; done
}
# kube-apiserver before etcd, as envtest does.
for name in kube-apiserver etcd; do
  [ -n "${KUBEBUILDER_ASSETS:-}" ] || break # up.sh stopped before it wrote the env file's end
  left=()
  for exe in /proc/[0-9]*/exe; do
    t=$(readlink "$exe" 2>/dev/null) || continue
    [ "$t" = "$KUBEBUILDER_ASSETS/$name" ] || continue
    p=${exe#/proc/}; p=${p%/exe}
    # Only this run's: envtest puts their dirs under this run's TMPDIR. Another run sharing the
    # binaries (a developer's `make testenv`, a second checkout) keeps its servers.
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "$WARMD_TESTENV_DIR/" || continue
    left+=("$p")
  done
  [ ${#left[@]} -gt 0 ] && { echo "testenv: stopping ${#left[@]} leftover $name" >&2; stop_pids "${left[@]}"; }
done
if [ -f "$WARMD_TESTENV_DIR/pids" ]; then
  mapfile -t pids <"$WARMD_TESTENV_DIR/pids"
  stop_pids "${pids[@]}"
fi
# containerd leaves shims and mounts; unmount anything under the dir before removing it.
grep -o " $WARMD_TESTENV_DIR[^ ]*" /proc/mounts 2>/dev/null | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
rm -rf "$WARMD_TESTENV_DIR" "$envfile"

# lib.sh: what up.sh, restart.sh and down.sh share. Sourced, never run.
# The cluster lives in one network + mount namespace held open by a `sleep` (the holder); every daemon is
# started inside it with nsenter and recorded by PID in $WARMD_CLUSTER_DIR/pids ("<name> <pid>" lines).

log() { echo "cluster: $*" >&2; }

# in_ns <cmd...>: run a command inside the cluster's namespaces.
in_ns() { nsenter -t "$WARMD_CLUSTER_HOLDER" -m -n -- "$@"; }

# start <name> <cmd...>: start a daemon inside the namespaces, in its own session, logging to
# <dir>/logs/<name>.log; records its PID.
start() {
  local name=$1
  shift
  nsenter -t "$WARMD_CLUSTER_HOLDER" -m -n -- setsid "$@" >>"$WARMD_CLUSTER_DIR/logs/$name.log" 2>&1 </dev/null &
  echo "$name $!" >>"$WARMD_CLUSTER_DIR/pids"
}

# pid_of <name>: the last recorded PID of a daemon (empty if none).
pid_of() { awk -v n="$1" '$1 == n { p = $2 } END { if (p) print p }' "$WARMD_CLUSTER_DIR/pids" 2>/dev/null; }

# alive <pid>: running (a zombie waiting for its reaper, init here, has exited).
alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# stop_pids <pid...>: TERM, wait up to 10 s, then KILL.
stop_pids() {
  local p alive i
  for p in "$@"; do kill "$p" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do
    alive=0
    for p in "$@"; do alive "$p" && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2>/dev/null; done
  return 0
}

# stop <name>: stop a recorded daemon.
stop() {
  local p
  p=$(pid_of "$1")
  [ -n "$p" ] && stop_pids "$p"
  return 0
}

# wait_for <what> <seconds> <cmd...>: poll (every 0.2 s) until cmd succeeds; on timeout, or at once when
# the daemon <what> has exited, print the end of its log.
wait_for() {
  local what=$1 secs=$2 end=$((SECONDS + $2)) p
  shift 2
  p=$(pid_of "$what")
  while ((SECONDS < end)); do
    "$@" >/dev/null 2>&1 && return 0
    if [ -n "$p" ] && ! alive "$p"; then
      log "$what exited; the end of its log:"
      tail -n 40 "$WARMD_CLUSTER_DIR/logs/$what.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.2
  done
  log "$what did not come up in ${secs}s; the end of its log:"
  tail -n 40 "$WARMD_CLUSTER_DIR/logs/$what.log" >&2 2>/dev/null || true
  return 1
}

# api <path>: kubectl-free API reads with the admin client cert (the API server pretty-prints JSON for
# curl; pipe through `tr -d ' \n'` before matching).
api() {
  curl -sf --max-time 5 --cacert "$WARMD_CLUSTER_DIR/pki/ca.crt" --cert "$WARMD_CLUSTER_DIR/pki/admin.crt" \
    --key "$WARMD_CLUSTER_DIR/pki/admin.key" "https://$WARMD_CLUSTER_NODE_IP:443$1"
}

# start_kubelet: (re)start the kubelet with the config in $WARMD_CLUSTER_DIR/kubelet/config.yaml, writing
# the image GC thresholds from WARMD_CLUSTER_IMAGE_GC_HIGH/LOW (default 85/80, the kubelet's own).
start_kubelet() {
  local high=${WARMD_CLUSTER_IMAGE_GC_HIGH:-85} low=${WARMD_CLUSTER_IMAGE_GC_LOW:-80} k=$WARMD_CLUSTER_DIR/kubelet
  sed -e "s/^imageGCHighThresholdPercent: .*/imageGCHighThresholdPercent: $high/" \
    -e "s/^imageGCLowThresholdPercent: .*/imageGCLowThresholdPercent: $low/" "$k/config.yaml" >"$k/config.yaml.tmp"
  mv "$k/config.yaml.tmp" "$k/config.yaml"
  log "kubelet: image GC thresholds high $high% low $low%"
  start kubelet "$WARMD_CLUSTER_BIN/kubelet" --config "$k/config.yaml" --kubeconfig "$k/kubeconfig" \
    --node-ip "$WARMD_CLUSTER_NODE_IP" --hostname-override "$WARMD_CLUSTER_NODE" --v 2
}

# start_scheduler [config]: (re)start kube-scheduler with a KubeSchedulerConfiguration (default: the plain
# one up.sh wrote). --v 4 logs each extender call and the scores it used.
start_scheduler() {
  local cfg=${1:-$WARMD_CLUSTER_DIR/scheduler/config.yaml}
  log "kube-scheduler: --config $cfg"
  start kube-scheduler "$WARMD_CLUSTER_BIN/kube-scheduler" --config "$cfg" --bind-address 127.0.0.1 \
    --authentication-kubeconfig "$WARMD_CLUSTER_DIR/scheduler/kubeconfig" \
    --authorization-kubeconfig "$WARMD_CLUSTER_DIR/scheduler/kubeconfig" --v 4
}

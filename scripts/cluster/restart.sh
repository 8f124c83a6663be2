#!/usr/bin/env bash
# restart.sh restarts one daemon of a running cluster (up.sh), as an operator would after changing its
# config: the e2e restarts the kubelet with lowered image GC thresholds and the scheduler with warmd's
# KubeSchedulerConfiguration. Pods keep running across a kubelet restart.
# Usage: restart.sh <envfile> kubelet            (WARMD_CLUSTER_IMAGE_GC_HIGH/_LOW set the thresholds)
#        restart.sh <envfile> kube-scheduler [config]   (a config path inside the node; default: up.sh's)
set -euo pipefail
envfile=$1
what=$2
# shellcheck disable=SC1090
. "$envfile"
. "$(dirname "$0")/lib.sh"
case $what in
kubelet)
  stop kubelet
  start_kubelet
  wait_for kubelet 60 in_ns curl -sf http://127.0.0.1:10248/healthz
  ;;
kube-scheduler)
  stop kube-scheduler
  start_scheduler "${3:-}"
  wait_for kube-scheduler 60 in_ns curl -sfk https://127.0.0.1:10259/readyz
  ;;
*)
  log "restart.sh: unknown daemon $what (want kubelet or kube-scheduler)"
  exit 2
  ;;
esac

#!/usr/bin/env bash
# up.sh starts a real one-node Kubernetes v1.37.2 cluster for the cluster e2e (test/cluster):
#   etcd + kube-apiserver (ServiceAccount token signing, Node+RBAC authorization, NodeRestriction; the
#   ValidatingAdmissionPolicy plugin is on by default) + kube-controller-manager (ServiceAccount
#   credentials, CSR signing) + kube-scheduler + kubelet on containerd 2.4.2's CRI (cgroupfs on this
#   cgroup v1 host, Debian's bridge CNI, the pause image from hack/pause), registering its Node with the
#   warmd.io/cold:NoSchedule startup taint as Karpenter's startupTaints would; plus a registry
#   (Debian docker-registry) and an S3 server (versitygw) the pods reach.
# Everything runs in one network + mount namespace of its own, so the node looks like a real one
# (/run/containerd/containerd.sock, /var/lib/kubelet, /var/lib/warmd, /var/log/pods, /etc/kubernetes) while
# the host is unchanged: /etc, /var/lib and /var/log are overlays whose writes land under the run's temp
# dir, /run is a tmpfs (containerd's shim sockets included), and the sysctls the kubelet insists on are
# bind-mounted files. Outside that temp dir only two things are made, both removed by down.sh: a veth pair
# (the kubelet refuses a loopback node IP) and the cgroup dirs /sys/fs/cgroup/<controller>/<cgroupRoot>.
# The API server also answers on the kubernetes Service IP (10.96.0.1:443, an address of the namespace),
# so in-cluster clients work without kube-proxy; other Service IPs do not answer (no kube-proxy, no DNS).
# Every name is unique per run (temp dir, veth, cgroupRoot, /30 subnet), so two runs can coexist.
# Usage: up.sh <bindir> <envfile>   (bindir from scripts/testbin.sh; source envfile afterwards)
# Env: WARMD_CLUSTER_IMAGE_GC_HIGH / _LOW: the kubelet's image GC thresholds (default 85/80).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
bin=$(cd "$1" && pwd)
envfile=$2
t0=$(date +%s.%N)
for f in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet containerd ctr containerd-shim-runc-v2 versitygw pause.tar; do
  [ -e "$bin/$f" ] || { log "$bin/$f is missing: run scripts/testbin.sh"; exit 1; }
done
for f in /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/bin/docker-registry /usr/sbin/runc; do
  [ -x "$f" ] || { log "$f is missing: run scripts/testbin.sh debian"; exit 1; }
done
[ "$(id -u)" = 0 ] || { log "needs root (namespaces, mounts, cgroups)"; exit 1; }

dir=$(mktemp -d /tmp/wdc-XXXXXX) # short: unix socket paths must stay under 104 characters
id=${dir##*-}
id=$(echo "$id" | tr 'A-Z' 'a-z')
export WARMD_CLUSTER_DIR=$dir WARMD_CLUSTER_BIN=$bin
export WARMD_CLUSTER_NODE=gpu-node-$id
mkdir -p "$dir"/{logs,pki,ovl,etcd,containerd,kubelet-root,warmd,pods,cni,registry,s3,scheduler,controller-manager,kubelet}
: >"$dir/pids"
# From here on a failure tears down whatever was started.
state=$dir/state
trap 'rc=$?; if [ $rc != 0 ]; then log "bring-up failed (exit $rc); tearing down"; "$here/down.sh" "$state"; fi' EXIT
cat >"$state" <<ENV
export WARMD_CLUSTER_DIR=$dir
export WARMD_CLUSTER_BIN=$bin
export WARMD_CLUSTER_NODE=$WARMD_CLUSTER_NODE
export WARMD_CLUSTER_CGROUP_ROOT=/wdc-$id
export WARMD_CLUSTER_VETH=wdc${id}h
ENV

# --- namespaces: a holder process keeps a new network + mount namespace alive ---
setsid unshare --net --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
holder=$!
echo "holder $holder" >>"$dir/pids"
echo "export WARMD_CLUSTER_HOLDER=$holder" >>"$state"
export WARMD_CLUSTER_HOLDER=$holder
for ((i = 0; i < 50; i++)); do
  [ "$(readlink /proc/$holder/ns/net 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] &&
    [ "$(readlink /proc/$holder/ns/mnt 2>/dev/null)" != "$(readlink /proc/self/ns/mnt)" ] && break
  sleep 0.05
done
[ "$(readlink /proc/$holder/ns/net)" != "$(readlink /proc/self/ns/net)" ] || { log "unshare did not make a network namespace"; exit 1; }

# A free 10.<200-249>.<0-255>.0/30 for the veth pair: .1 on the host, .2 (the node IP) inside.
for ((i = 0; i < 50; i++)); do
  net=10.$((200 + RANDOM % 50)).$((RANDOM % 256))
  ip -4 -o addr show | grep -q " $net\." || ip -4 route show | grep -q "^$net\." || break
done
hostip=$net.1
nodeip=$net.2
export WARMD_CLUSTER_NODE_IP=$nodeip
ip link add "wdc${id}h" type veth peer name "wdc${id}n"
ip link set "wdc${id}n" netns "$holder"
ip addr add "$hostip/30" dev "wdc${id}h"
ip link set "wdc${id}h" up
in_ns ip link set lo up
in_ns ip link set "wdc${id}n" name eth0
in_ns ip addr add "$nodeip/30" dev eth0
in_ns ip link set eth0 up
in_ns ip route add default via "$hostip" # the host does not forward: this only gives tools a default route
in_ns ip addr add 10.96.0.1/32 dev lo    # the kubernetes Service IP: the API server answers there itself

# --- the node's file system: overlays and a tmpfs, all private to the mount namespace ---
in_ns bash -eu -c '
  d=$1
  for p in etc var/lib var/log; do
    n=${p//\//-}
    mkdir -p "$d/ovl/$n-upper" "$d/ovl/$n-work"
    mount -t overlay overlay -o "lowerdir=/$p,upperdir=$d/ovl/$n-upper,workdir=$d/ovl/$n-work" "/$p"
  done
  mount -t tmpfs -o mode=755 tmpfs /run
  mkdir -p /run/containerd /var/lib/kubelet /var/lib/warmd /var/lib/cni /var/log/pods /etc/kubernetes/pki /etc/cni/net.d /etc/containerd/certs.d
  mount --bind "$d/kubelet-root" /var/lib/kubelet
  mount --bind "$d/warmd" /var/lib/warmd
  mount --bind "$d/cni" /var/lib/cni
  mount --bind "$d/pods" /var/log/pods
  # The kubelet (protectKernelDefaults) refuses to start unless these sysctls have its values, and
  # would rewrite them on the host otherwise: show it files that hold them instead.
  for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    k=${kv%%=*} v=${kv#*=}
    [ "$(cat /proc/sys/$k)" = "$v" ] && continue
    f=$d/sysctl-${k//\//.}
    echo "$v" >"$f"
    mount --bind "$f" "/proc/sys/$k"
  done
' _ "$dir"

# --- cgroups: the kubelet's cgroupRoot must exist in every v1 controller ---
cgroot=/wdc-$id
for c in /sys/fs/cgroup/*/; do
  c=${c%/}
  [ "$(stat -fc %T "$c")" = cgroupfs ] || continue # v1 hierarchies only (not the cgroup2 "unified")
  mkdir -p "$c$cgroot"
  if [ -f "$c/cpuset.cpus" ]; then
    cat "$c/cpuset.cpus" >"$c$cgroot/cpuset.cpus"
    cat "$c/cpuset.mems" >"$c$cgroot/cpuset.mems"
  fi
done

# --- PKI: one CA for clients and servers, the ServiceAccount signing pair ---
pki=$dir/pki
openssl_quiet() { openssl "$@" >/dev/null 2>&1; }
openssl_quiet req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=warmd-test-ca \
  -keyout "$pki/ca.key" -out "$pki/ca.crt"
cert() { # cert <name> <subject> [subjectAltName]
  local ext=$pki/$1.ext
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
  [ -n "${3:-}" ] && echo "subjectAltName=$3" >>"$ext"
  openssl_quiet req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr"
  openssl_quiet x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
    -extfile "$ext" -out "$pki/$1.crt"
}
cert apiserver /CN=kube-apiserver "IP:$nodeip,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert admin "/O=system:masters/CN=warmd-test-admin"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert controller-manager /CN=system:kube-controller-manager
cert scheduler /CN=system:kube-scheduler
cert kubelet "/O=system:nodes/CN=system:node:$WARMD_CLUSTER_NODE"
openssl_quiet genrsa -out "$pki/sa.key" 2048
openssl_quiet rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
kubeconfig() { # kubeconfig <cert name> <file>
  cat >"$2" <<KC
apiVersion: v1
kind: Config
clusters:
- name: warmd-test
  cluster:
    server: https://$nodeip:443
    certificate-authority: $pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $pki/$1.crt
    client-key: $pki/$1.key
contexts:
- name: warmd-test
  context: {cluster: warmd-test, user: $1}
current-context: warmd-test
KC
}
kubeconfig admin "$dir/admin.kubeconfig"
kubeconfig controller-manager "$dir/controller-manager/kubeconfig"
kubeconfig scheduler "$dir/scheduler/kubeconfig"
kubeconfig kubelet "$dir/kubelet/kubeconfig"
# Where a kubeadm node keeps them (the shipped scheduler config names /etc/kubernetes/scheduler.conf).
in_ns cp "$dir/scheduler/kubeconfig" /etc/kubernetes/scheduler.conf
in_ns cp "$dir/kubelet/kubeconfig" /etc/kubernetes/kubelet.conf
in_ns cp "$dir/admin.kubeconfig" /etc/kubernetes/admin.conf
in_ns cp "$pki/ca.crt" /etc/kubernetes/pki/ca.crt

# --- containerd 2.4.2 with its CRI plugin ---
cat >"$dir/containerd/config.toml" <<TOML
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "/run/containerd/containerd.sock"
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "localhost/warmd-test/pause:v1"
[plugins."io.containerd.cri.v1.images".registry]
  config_path = "/etc/containerd/certs.d"
[plugins."io.containerd.transfer.v1.local"]
  config_path = "/etc/containerd/certs.d"
[plugins."io.containerd.cri.v1.runtime"]
  # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails in runc create.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = "/usr/sbin/runc"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
TOML
# The registry is plain HTTP on the node IP (pods and containerd reach it at the same address).
in_ns mkdir -p "/etc/containerd/certs.d/$nodeip:5000"
in_ns tee "/etc/containerd/certs.d/$nodeip:5000/hosts.toml" >/dev/null <<TOML
server = "http://$nodeip:5000"
[host."http://$nodeip:5000"]
  capabilities = ["pull", "resolve", "push"]
TOML
in_ns tee /etc/cni/net.d/10-warmd-test.conflist >/dev/null <<JSON
{
  "cniVersion": "1.0.0",
  "name": "warmd-test",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
JSON
start containerd env PATH="$bin:/usr/sbin:/usr/bin:/sbin:/bin" "$bin/containerd" --config "$dir/containerd/config.toml"
wait_for containerd 30 in_ns "$bin/ctr" --address /run/containerd/containerd.sock version
in_ns "$bin/ctr" --address /run/containerd/containerd.sock -n k8s.io images import --no-unpack "$bin/pause.tar" >>"$dir/logs/ctr.log" 2>&1

# --- registry and S3 inside the namespace, on the node IP ---
cat >"$dir/registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $dir/registry
  delete:
    enabled: true
http:
  addr: $nodeip:5000
log:
  level: warn
YML
start registry /usr/bin/docker-registry serve "$dir/registry.yml"
s3key=warmd-$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n')
s3secret=$(head -c24 /dev/urandom | od -An -tx1 | tr -d ' \n')
start versitygw env ROOT_ACCESS_KEY="$s3key" ROOT_SECRET_KEY="$s3secret" "$bin/versitygw" --port "$nodeip:7070" --keep-alive --quiet posix "$dir/s3"

# --- etcd, kube-apiserver ---
start etcd "$bin/etcd" --name default --data-dir "$dir/etcd" --unsafe-no-fsync \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster default=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 --log-level warn
wait_for etcd 30 in_ns curl -sf http://127.0.0.1:2379/health
start kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
  --bind-address 0.0.0.0 --secure-port 443 --advertise-address "$nodeip" \
  --service-cluster-ip-range 10.96.0.0/16 --cert-dir "$dir/pki/apiserver-certs" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP --profiling=false --v 1
wait_for kube-apiserver 90 api /readyz

# --- kube-controller-manager, kube-scheduler ---
start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/controller-manager/kubeconfig" \
  --authentication-kubeconfig "$dir/controller-manager/kubeconfig" --authorization-kubeconfig "$dir/controller-manager/kubeconfig" \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" --use-service-account-credentials \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --bind-address 127.0.0.1 --leader-elect=false --v 1
cat >"$dir/scheduler/config.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
leaderElection:
  leaderElect: true
YAML
start_scheduler

# --- kubelet ---
cat >"$dir/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
address: $nodeip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
protectKernelDefaults: true
failSwapOn: false
registerWithTaints:
  - {key: warmd.io/cold, effect: NoSchedule}
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 85
imageGCLowThresholdPercent: 80
imageMinimumGCAge: 0s
podLogsDir: /var/log/pods
serializeImagePulls: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
staticPodPath: ""
YAML
start_kubelet

wait_node_ready() { api "/api/v1/nodes/$WARMD_CLUSTER_NODE" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'; }
wait_for kubelet 120 wait_node_ready
api "/api/v1/nodes/$WARMD_CLUSTER_NODE" | tr -d ' \n' | grep -q '{"key":"warmd.io/cold","effect":"NoSchedule"}' ||
  { log "Node $WARMD_CLUSTER_NODE registered without the startup taint warmd.io/cold:NoSchedule"; exit 1; }
wait_for kube-controller-manager 60 api /api/v1/namespaces/default/serviceaccounts/default
t1=$(date +%s.%N)

rss() { # total RSS (MiB) of the recorded daemons
  local n p kb=0
  while read -r n p; do
    [ "$n" = holder ] && continue
    kill -0 "$p" 2>/dev/null || continue
    kb=$((kb + $(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done <"$dir/pids"
  echo $((kb / 1024))
}
ver() { "$bin/$1" --version 2>&1 | head -1; }
kv=$(api "/api/v1/nodes/$WARMD_CLUSTER_NODE" | tr -d ' \n' | sed -n 's/.*"kubeletVersion":"\([^"]*\)".*/\1/p')
log "kube-apiserver $(ver kube-apiserver | awk '{print $2}'), etcd $("$bin/etcd" --version | awk '/etcd Version/ {print $3}'), kube-controller-manager $(ver kube-controller-manager | awk '{print $2}'), kube-scheduler $(ver kube-scheduler | awk '{print $2}'), kubelet $(ver kubelet | awk '{print $2}') (Node reports $kv), containerd $(in_ns "$bin/ctr" --address /run/containerd/containerd.sock version | awk '/Server:/ {s=1} s && /Version:/ {print $2; exit}'), runc $(/usr/sbin/runc --version | awk 'NR==1 {print $3}'), CNI plugins $(dpkg-query -W -f '${Version}' containernetworking-plugins 2>/dev/null || echo unknown)"
log "node $WARMD_CLUSTER_NODE ($nodeip) Ready with taint warmd.io/cold:NoSchedule in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')s; daemons' RSS $(rss) MiB"

cat >>"$state" <<ENV
export WARMD_CLUSTER_NODE_IP=$nodeip
export WARMD_CLUSTER_HOST_IP=$hostip
export WARMD_CLUSTER_KUBECONFIG=$dir/admin.kubeconfig
export WARMD_CLUSTER_REGISTRY=$nodeip:5000
export WARMD_CLUSTER_S3=http://$nodeip:7070
export WARMD_CLUSTER_S3_ACCESS_KEY=$s3key
export WARMD_CLUSTER_S3_SECRET_KEY=$s3secret
export WARMD_CLUSTER_S3_ROOT=$dir/s3
export WARMD_CLUSTER_SCRIPTS=$here
export WARMD_CLUSTER_STARTED_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
ENV
cp "$state" "$envfile"
trap - EXIT

// Package cluster gives the cluster e2e (test/cluster) the real one-node Kubernetes cluster that
// scripts/cluster/up.sh starts: the node's coordinates, an admin client, and the few operator actions
// a test needs on the node itself (run a command inside it, restart its kubelet or scheduler, write a
// file there). Like internal/testenv, a missing cluster fails the test in CI and skips it elsewhere,
// naming `make cluster-e2e`.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/kube"
)

// EnvFile names the env file up.sh wrote; scripts/cluster/with-cluster.sh exports it.
const EnvFile = "WARMD_CLUSTER_ENV"

// Cluster is a running one-node cluster.
type Cluster struct {
	// Node is the Node's name; NodeIP its address (the kubelet's, the API server's, the registry's).
	Node, NodeIP string
	// Registry is host:port of the plain-HTTP registry the node's containerd and its pods reach; the test
	// process reaches it at the same address.
	Registry string
	// S3 is the versitygw server the node's pods reach (Endpoint on the node IP).
	S3 testenv.S3
	// Kubeconfig is an admin (system:masters) kubeconfig for the API server at https://NodeIP:443.
	Kubeconfig string
	Config     *rest.Config
	Client     kube.Interface // warmd's narrow client (pkg/kube)
	// Clientset is client-go's whole one, for what warmd never reads or writes (secrets, deployments).
	Clientset kubernetes.Interface
	// Dir is the run's temp dir (logs/<daemon>.log, the node's data dirs).
	Dir string
	// Bin holds the service binaries (kubelet, ctr, ...).
	Bin string

	env     string
	scripts string
	holder  string
}

// Require returns the running cluster, or ends the test (Fatal in CI, Skip elsewhere).
func Require(t testing.TB) *Cluster {
	t.Helper()
	path := testenv.Require(t, EnvFile, "the one-node cluster (scripts/cluster/up.sh): run `make cluster-e2e`;")
	vars, err := readEnv(path)
	if err != nil {
		t.Fatalf("cluster env file: %v", err)
	}
	get := func(k string) string {
		v := vars[k]
		if v == "" {
			t.Fatalf("cluster env file %s has no %s", path, k)
		}
		return v
	}
	c := &Cluster{
		Node: get("WARMD_CLUSTER_NODE"), NodeIP: get("WARMD_CLUSTER_NODE_IP"), Registry: get("WARMD_CLUSTER_REGISTRY"),
		S3: testenv.S3{
			Endpoint: get("WARMD_CLUSTER_S3"), AccessKey: get("WARMD_CLUSTER_S3_ACCESS_KEY"),
			SecretKey: get("WARMD_CLUSTER_S3_SECRET_KEY"), Root: get("WARMD_CLUSTER_S3_ROOT"),
		},
		Kubeconfig: get("WARMD_CLUSTER_KUBECONFIG"), Dir: get("WARMD_CLUSTER_DIR"), Bin: get("WARMD_CLUSTER_BIN"),
		env: path, scripts: get("WARMD_CLUSTER_SCRIPTS"), holder: get("WARMD_CLUSTER_HOLDER"),
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		t.Fatalf("admin kubeconfig: %v", err)
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if c.Client, err = kube.NewForConfig(c.Config); err != nil {
		t.Fatalf("admin client: %v", err)
	}
	if c.Clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		t.Fatalf("admin clientset: %v", err)
	}
	return c
}

// readEnv parses the `export K=V` lines up.sh writes.
func readEnv(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	return vars, sc.Err()
}

// InNode runs a command inside the node (its network and mount namespaces) and returns its combined
// output; a non-zero exit is an error carrying that output.
func (c *Cluster) InNode(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", c.holder, "-m", "-n", "--"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("in node: %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// WriteNodeFile writes data to path inside the node's file system (e.g. a scheduler config under
// /etc/kubernetes), creating its parent dirs.
func (c *Cluster) WriteNodeFile(ctx context.Context, path string, data []byte) error {
	if _, err := c.InNode(ctx, nil, "mkdir", "-p", filepath.Dir(path)); err != nil {
		return err
	}
	_, err := c.InNode(ctx, data, "sh", "-c", `cat >"$1"`, "_", path)
	return err
}

// nodeMounts are the node's dirs up.sh bind-mounts from the run's temp dir, so the test reads them
// directly (a socket included: unix sockets are file system objects, whatever the network namespace).
var nodeMounts = []struct{ node, host string }{
	{"/var/lib/warmd", "warmd"},
	{"/var/lib/kubelet", "kubelet-root"},
	{"/var/log/pods", "pods"},
}

// HostPath maps a path on the node under /var/lib/warmd, /var/lib/kubelet or /var/log/pods to where
// the test process sees it; other paths are not visible outside the node (use InNode) and map to "".
// Mounts the kubelet makes inside the node (a pod's projected-token tmpfs) are not visible either.
func (c *Cluster) HostPath(nodePath string) string {
	for _, m := range nodeMounts {
		if nodePath == m.node || strings.HasPrefix(nodePath, m.node+"/") {
			return filepath.Join(c.Dir, m.host, strings.TrimPrefix(nodePath, m.node))
		}
	}
	return ""
}

// Ctr runs the node containerd's ctr in the kubelet's namespace (k8s.io).
func (c *Cluster) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	return c.InNode(ctx, nil, append([]string{filepath.Join(c.Bin, "ctr"), "--address", "/run/containerd/containerd.sock", "-n", "k8s.io"}, args...)...)
}

// RestartKubelet restarts the node's kubelet with image GC thresholds high/low (percent of the image
// file system in use), as an operator changing KubeletConfiguration would; pods keep running.
func (c *Cluster) RestartKubelet(ctx context.Context, high, low int) error {
	return c.restart(ctx, []string{fmt.Sprintf("WARMD_CLUSTER_IMAGE_GC_HIGH=%d", high), fmt.Sprintf("WARMD_CLUSTER_IMAGE_GC_LOW=%d", low)}, "kubelet")
}

// RestartScheduler restarts kube-scheduler with --config at configPath inside the node ("" for the
// plain config up.sh wrote).
func (c *Cluster) RestartScheduler(ctx context.Context, configPath string) error {
	args := []string{"kube-scheduler"}
	if configPath != "" {
		args = append(args, configPath)
	}
	return c.restart(ctx, nil, args...)
}

func (c *Cluster) restart(ctx context.Context, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.scripts, "restart.sh"), append([]string{c.env}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("restart %s: %w: %s", args[0], err, bytes.TrimSpace(out))
	}
	return nil
}

// Log returns a daemon's log (kubelet, kube-scheduler, containerd, ...), for assertions and failures.
func (c *Cluster) Log(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.Dir, "logs", name+".log"))
	return string(data)
}

// DumpOnFailure prints the last lines of every daemon's log when t has failed, so a CI failure can be
// read without the (already removed) temp dir.
func (c *Cluster) DumpOnFailure(t testing.TB, lines int) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(c.Dir, "logs", "*.log"))
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(all) > lines {
				all = all[len(all)-lines:]
			}
			t.Logf("--- last %d lines of %s ---\n%s", len(all), filepath.Base(l), strings.Join(all, "\n"))
		}
	})
}

// Eventually polls cond every interval until it returns true or the timeout passes; cond's last error
// (or "timed out") is returned then. Every wait in the e2e is bounded by it.
func Eventually(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("not within %s: %w", timeout, last)
			}
			return fmt.Errorf("not within %s", timeout)
		case <-time.After(interval):
		}
	}
}

// StartInNode starts a long-running command inside the node (its network and mount namespaces), its
// output in Dir/logs/<name>.log (so DumpOnFailure prints it), and stops it when t ends.
func (c *Cluster) StartInNode(t testing.TB, name string, args ...string) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.Dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// nsenter without a PID namespace execs the command itself, so its PID is the command's.
	cmd := exec.Command("nsenter", append([]string{"-t", c.holder, "-m", "-n", "--"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s in the node: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
}

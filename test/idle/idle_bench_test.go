//go:build bench

package idle

import (
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"warmd.io/warmd/internal/fixtures"
	"warmd.io/warmd/internal/procstat"
	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/readiness"
)

// user is the API server user warmd runs as here; the audit policy records only its requests.
const user = "warmd-idle"

// heartbeatEvery is readiness's default WarmdReady heartbeat (readiness.WriterOptions.Heartbeat),
// checked every quarter of it, so one heartbeat write falls every 5m to 5m+75s.
const heartbeatEvery = 5 * time.Minute

// TestBenchIdle is `make bench-idle`: three small models (each with its own image, weights in S3 and
// the compile cache on) warm on a node whose GPU is the recorded H100, then IDLE seconds (default
// 600) of nothing changing. It measures warmd's CPU seconds over the window (utime+stime from
// /proc/<pid>/stat), its peak RSS (VmHWM, the whole run's peak, warm-up included) and the API
// requests it made, counted by the API server (its audit log, warmd's user only), not by warmd.
// Writes that only refresh the WarmdReady heartbeat are told apart by their bodies.
// Last line: idle: cpu_pct <P>, rss_mib <R>, api_writes <N> over <S>s
func TestBenchIdle(t *testing.T) {
	idle := 600 * time.Second
	if s := os.Getenv("IDLE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("IDLE=%q: want whole seconds", s)
		}
		idle = time.Duration(n) * time.Second
	}
	root := t.TempDir()
	auditLog := filepath.Join(root, "audit.log")
	policy := filepath.Join(root, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy(user)), 0o644); err != nil {
		t.Fatal(err)
	}
	kenv := kubeenv.Start(t, func(e *envtest.Environment) {
		// envtest's 20s default is too short on a loaded machine; the benchmark waits, it does not time starts.
		e.ControlPlaneStartTimeout = 3 * time.Minute
		e.ControlPlane.GetAPIServer().Configure().
			Set("audit-policy-file", policy).Set("audit-log-path", auditLog).Set("audit-log-mode", "blocking")
	})
	s3 := testenv.RequireS3(t)
	ctrd := testenv.StartContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), idle+10*time.Minute)
	defer cancel()

	// Three models, each with its own image; a compile-cache remote for the SKU.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	bucket := fmt.Sprintf("idle-%d", time.Now().UnixNano())
	defer os.RemoveAll(filepath.Join(s3.Root, bucket))
	var models strings.Builder
	for i := range 3 {
		image := fmt.Sprintf("%s/idle/vllm-%d:v1", strings.TrimPrefix(reg.URL, "http://"), i)
		if _, err := fixtures.PushRandomImage(image, 256<<10, 2); err != nil {
			t.Fatal(err)
		}
		m, err := fixtures.NewModel(fixtures.ModelSpec{Shards: 2, TensorsA: 4, BytesPerTensor: 256 << 10, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.WriteDir(filepath.Join(s3.Root, bucket, fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&models, "- name: idle/model-%d\n  source: s3://%s/m%d/\n  image: %s\n", i, bucket, i, image)
	}
	if err := os.MkdirAll(filepath.Join(s3.Root, bucket, "caches"), 0o755); err != nil {
		t.Fatal(err)
	}

	const nodeName = "idle-node"
	if _, err := kenv.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: nodeName, Labels: map[string]string{"kubernetes.io/hostname": nodeName}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := kenv.Kubeconfig(t, user, root)
	dataDir, podLogs := filepath.Join(root, "data"), filepath.Join(root, "pods")
	if err := os.MkdirAll(podLogs, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(root, "config.yaml")
	cfg := fmt.Sprintf(`apiVersion: warmd.io/v1alpha1
kind: NodeConfig
nodeName: %s
dataDir: %s
containerd: {address: %s}
s3: {endpoint: %s}
models:
%scompileCache: {remote: 's3://%s/caches'}
phases: {podLogDir: %s}
readiness: {kubeconfig: %s}
api: {listen: '127.0.0.1:0'}
`, nodeName, dataDir, ctrd.Socket, s3.Endpoint, models.String(), bucket, podLogs, kubeconfig)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	inventory, _ := filepath.Abs("../../pkg/nvml/testdata/recorded-h100x8.json")
	logFile, err := os.Create(filepath.Join(root, "warmd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(warmdBin, "run", "--config", cfgPath, "--log-format", "text")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3.SecretKey,
		nvml.EnvRecordedInventory+"="+inventory)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b, _ := os.ReadFile(logFile.Name())
		if t.Failed() {
			t.Logf("warmd log:\n%s", tail(b, 8000))
		}
		if p := os.Getenv("IDLE_KEEP_LOG"); p != "" { // for looking into a figure afterwards
			_ = os.WriteFile(p, b, 0o644)
		}
	}()

	// Warm: the daemon says so and the API server has the node labelled warm.
	client := api.NewClient(filepath.Join(dataDir, "warmd.sock"))
	warmAt := time.Now()
	for {
		st, err := client.Status(ctx)
		var rs readiness.Status
		if err == nil {
			rs, _, err = readiness.Section.Decode(st.Sections)
		}
		node, gerr := kenv.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil && gerr == nil && rs.Warm && node.Labels["warmd.io/warm"] == "true" {
			break
		}
		if ctx.Err() != nil || time.Since(warmAt) > 5*time.Minute {
			t.Fatalf("not warm after %s: status err %v, node err %v, readiness %+v", time.Since(warmAt), err, gerr, rs)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("warm after %.1fs (3 models, images, weights, compile cache)", time.Since(warmAt).Seconds())

	// The idle window.
	start, cpu0 := time.Now(), cpuSeconds(t, pid)
	time.Sleep(idle)
	end, cpu1 := time.Now(), cpuSeconds(t, pid)
	hwm, rss := procStatusKiB(t, pid, "VmHWM"), procStatusKiB(t, pid, "VmRSS")
	anon, file := procStatusKiB(t, pid, "RssAnon"), procStatusKiB(t, pid, "RssFile")
	window := end.Sub(start).Seconds()

	reqs, err := readAudit(auditLog, user)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) == 0 {
		t.Fatalf("the audit log %s has no request of %s: the count would be meaningless", auditLog, user)
	}
	agents := map[string]bool{}
	byVerb, byWhat, before := map[string]int{}, map[string]int{}, map[string]int{}
	writes, beats := 0, 0
	last := map[string]request{} // the previous write per verb+resource+name, warm-up included
	for _, r := range reqs {
		key := r.what()
		if r.ObjectRef != nil {
			key += " " + r.ObjectRef.Name
		}
		in := !r.Received.Before(start) && r.Received.Before(end)
		if r.Received.Before(start) {
			before[r.Verb]++
		}
		if in {
			agents[r.UserAgent] = true
			byVerb[r.Verb]++
			byWhat[r.what()]++
		}
		if !r.write() {
			continue
		}
		if in {
			writes++
			if p, ok := last[key]; ok && heartbeat(p, r) {
				beats++
			} else {
				t.Logf("write beyond the heartbeat at +%.1fs: %s %s (HTTP %v) body %s", r.Received.Sub(start).Seconds(),
					r.what(), r.ObjectRef.Name, r.ResponseStatus, tail(r.RequestObject, 600))
			}
		}
		last[key] = r
	}
	// The window starts right after the write that made the node warm, and each heartbeat falls 5m
	// to 5m+75s after the previous write: at most ceil(S/300) of them in S whole seconds.
	expected := int(math.Ceil(math.Round(window) / heartbeatEvery.Seconds()))
	t.Logf("requests before the window (start-up and warm-up, as audited): %s", counts(before))
	t.Logf("requests by verb over %.0fs: %s", window, counts(byVerb))
	t.Logf("requests by verb and resource: %s", counts(byWhat))
	t.Logf("user agents: %v", keys(agents))
	t.Logf("writes: %d, of which heartbeat-only %d (at most %d expected: one per %s), beyond the heartbeat %d",
		writes, beats, expected, heartbeatEvery, writes-beats)
	t.Logf("cpu %.2fs over %.0fs; VmHWM %d KiB; at the end VmRSS %d KiB = RssAnon %d KiB (heap, stacks) + RssFile %d KiB (the binary's own pages, shared and reclaimable) + shmem; largest mappings: %s",
		cpu1-cpu0, window, hwm, rss, anon, file, topMappings(pid, 6))
	fmt.Printf("idle: cpu_pct %.2f, rss_mib %d, api_writes %d over %.0fs\n",
		100*(cpu1-cpu0)/window, (hwm+512)/1024, writes, window)
}

// cpuSeconds is utime+stime of pid from /proc/<pid>/stat, in seconds (USER_HZ is 100 on Linux).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return (utime + stime) / 100
}

func procStatusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	n, err := procstat.StatusKiB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// topMappings names the n mappings of pid with the most resident memory (/proc/<pid>/smaps), to say
// where the RSS is: Go heap, cgo, mapped buffers or files.
func topMappings(pid, n int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return err.Error()
	}
	type mapping struct {
		name string
		kib  int
	}
	var all []mapping
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			name := "[anon]"
			if len(f) >= 6 {
				name = f[5]
			}
			all = append(all, mapping{name: f[0] + " " + name})
		case len(f) == 3 && f[0] == "Rss:" && len(all) > 0:
			all[len(all)-1].kib, _ = strconv.Atoi(f[1])
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].kib > all[j].kib })
	var parts []string
	for _, m := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %d KiB", m.name, m.kib))
	}
	return strings.Join(parts, "; ")
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range keys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

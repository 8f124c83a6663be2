package follow

import (
	"bufio"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/state"
	"warmd.io/warmd/pkg/state/statetest"
)

// fixture returns a testdata log's lines (with their newlines).
func fixture(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text()+"\n")
	}
	return lines
}

// want parses a fixture whole: the follower, however the file was written, must agree with it.
func want(t *testing.T, name string) phases.Result {
	t.Helper()
	r, err := phases.Parse(strings.NewReader(strings.Join(fixture(t, name), "")), phases.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// kubeletLog writes a container log the way kubelet + containerd do: appends to <N>.log; rotate
// renames it to <N>.log.<timestamp> while the runtime still holds it, then the runtime reopens a new file.
type kubeletLog struct {
	t    *testing.T
	path string
	f    *os.File
}

func newKubeletLog(t *testing.T, podLogDir, ns, pod, uid, container string, restart int) *kubeletLog {
	dir := filepath.Join(podLogDir, ns+"_"+pod+"_"+uid, container)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &kubeletLog{t: t, path: filepath.Join(dir, strconv.Itoa(restart)+".log")}
	l.reopen()
	t.Cleanup(func() { l.f.Close() })
	return l
}

func (l *kubeletLog) reopen() {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		l.t.Fatal(err)
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f = f
}

func (l *kubeletLog) write(s string) {
	if _, err := l.f.WriteString(s); err != nil {
		l.t.Fatal(err)
	}
}

// rotate renames the live file; writes keep going to it until reopen.
func (l *kubeletLog) rotate(suffix string) {
	if err := os.Rename(l.path, l.path+"."+suffix); err != nil {
		l.t.Fatal(err)
	}
}

func newFollower(t *testing.T, podLogDir, stateDir string, m *metrics.Metrics, store *state.Store, info ...ContainerInfoFunc) *Follower {
	t.Helper()
	var ci ContainerInfoFunc
	if len(info) > 0 {
		ci = info[0]
	}
	f, err := New(Options{
		Container: ci,
		Dir:       podLogDir, StateDir: stateDir, Keep: 10, Settle: -1, ProbeLines: 100,
		SKU:   func() string { return "nvidia-h100-80gb-hbm3" },
		Model: func(_, _ string, r phases.Result) string { return "qwen2.5-7b" },
		Store: store, Metrics: m.Phases,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFollowRotationRestartAndPersistence(t *testing.T) {
	root := t.TempDir()
	podLogs, stateDir := filepath.Join(root, "pods"), filepath.Join(root, "state")
	m := metrics.New(prometheus.NewRegistry())
	store := state.New(nil)
	f := newFollower(t, podLogs, stateDir, m, store)
	f.Sync() // the pod log dir does not exist yet: a problem, not a failure
	if st := phasesOf(store); len(st.Problems) == 0 {
		t.Errorf("missing pod log dir not reported")
	}

	// Pod 1: the seed's cold start, written in pieces with a rotation in the middle.
	cold := fixture(t, "seed-7b-cold.log")
	l := newKubeletLog(t, podLogs, "default", "vllm-0", "0f9c", "vllm", 0)
	third := len(cold) / 3
	l.write(strings.Join(cold[:third], ""))
	l.write(cold[third][:10]) // half a line: must wait for its newline
	f.Sync()
	if got := f.Records(); len(got) != 0 {
		t.Fatalf("recorded before the start finished: %+v", got)
	}
	if st := phasesOf(store); st.Following != 1 {
		t.Errorf("following %d, want 1", st.Following)
	}
	l.write(cold[third][10:])
	l.rotate("20261130-210300")
	l.write(strings.Join(cold[third+1:2*third], "")) // the runtime still writes to the renamed file
	l.reopen()
	l.write(strings.Join(cold[2*third:], ""))

	// A sidecar that is not vLLM, and pod 2 whose engine crashed then restarted and is still loading.
	side := newKubeletLog(t, podLogs, "default", "vllm-0", "0f9c", "istio-proxy", 0)
	for range 150 {
		side.write("2026-11-30T21:02:11.000000000Z stdout F [2026-11-30T21:02:11.000Z] \"GET /health HTTP/1.1\" 200 - via_upstream\n")
	}
	crash := newKubeletLog(t, podLogs, "ml", "llama-1", "77ab", "vllm", 0)
	crash.write(strings.Join(fixture(t, "crash-before-compile.log"), ""))
	again := newKubeletLog(t, podLogs, "ml", "llama-1", "77ab", "vllm", 1)
	again.write(strings.Join(cold[:third], ""))
	f.Sync()

	recs := f.Records()
	if len(recs) != 2 {
		t.Fatalf("got %d records, want the cold start and the crash: %+v", len(recs), recs)
	}
	byPod := map[string]phases.Record{}
	for _, r := range recs {
		byPod[r.Pod] = r
	}
	got, exp := byPod["vllm-0"].Result, want(t, "seed-7b-cold.log")
	if len(got.Phases) != len(exp.Phases) || got.Outcome != phases.OutcomeReady || got.CompileCache != phases.CacheMiss {
		t.Fatalf("cold start across a rotation: got %+v\nwant %+v", got, exp)
	}
	for i := range exp.Phases {
		if got.Phases[i].Name != exp.Phases[i].Name || got.Phases[i].Seconds != exp.Phases[i].Seconds {
			t.Errorf("phase %d = %+v, want %+v", i, got.Phases[i], exp.Phases[i])
		}
	}
	if r := byPod["vllm-0"]; r.GPUSKU != "nvidia-h100-80gb-hbm3" || r.Model != "qwen2.5-7b" || r.Container != "vllm" || r.Restart != 0 {
		t.Errorf("record identity: %+v", r)
	}
	if r := byPod["llama-1"]; r.Result.Outcome != phases.OutcomeFailed || r.Restart != 0 || !strings.HasPrefix(r.Result.Error, "FileNotFoundError") {
		t.Errorf("crashed start: %+v", r.Result)
	}
	if v := testutil.ToFloat64(m.Phases.Starts.WithLabelValues("ready", "miss")); v != 1 {
		t.Errorf("warmd_vllm_starts_total{ready,miss} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.Phases.Starts.WithLabelValues("failed", "unknown")); v != 1 {
		t.Errorf("warmd_vllm_starts_total{failed,unknown} = %v, want 1", v)
	}
	if n := testutil.CollectAndCount(m.Phases.PhaseSeconds); n != len(exp.Phases)+1 {
		t.Errorf("%d phase histograms, want %d (ready start's phases + total)", n, len(exp.Phases)+1)
	}
	if st := phasesOf(store); len(st.Records) != 2 || st.Following != 1 || len(st.Problems) != 0 {
		t.Errorf("status: %d records, following %d, problems %v", len(st.Records), st.Following, st.Problems)
	}

	// The restarted container ends without a verdict when the pod goes away.
	again.write(strings.Join(cold[third:third+5], ""))
	if err := os.RemoveAll(filepath.Join(podLogs, "ml_llama-1_77ab")); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	if recs := f.Records(); len(recs) != 3 || recs[2].Result.Outcome != phases.OutcomeIncomplete || recs[2].Restart != 1 {
		t.Fatalf("deleted pod's last start: %+v", recs[len(recs)-1])
	}

	// A restarted warmd keeps what it recorded and records nothing twice.
	f2 := newFollower(t, podLogs, stateDir, metrics.New(prometheus.NewRegistry()), state.New(nil))
	if n := len(f2.Records()); n != 3 {
		t.Fatalf("after restart %d records, want 3", n)
	}
	f2.Sync()
	if n := len(f2.Records()); n != 3 {
		t.Errorf("after restart and rescan %d records, want 3 (no duplicates)", n)
	}
	entries, _ := os.ReadDir(stateDir)
	if len(entries) != 1 || entries[0].Name() != "phases.json" {
		t.Errorf("state dir holds %v, want only phases.json (no temp files left)", entries)
	}
}

// A start found after warmd was down, already rotated and compressed by the kubelet, is read whole.
func TestFollowReadsCompressedRotation(t *testing.T) {
	root := t.TempDir()
	podLogs := filepath.Join(root, "pods")
	lines := fixture(t, "seed-7b-warm.log")
	dir := filepath.Join(podLogs, "default_vllm-1_aa11", "vllm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gz, err := os.Create(filepath.Join(dir, "0.log.20261130-210000.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(gz)
	if _, err := zw.Write([]byte(strings.Join(lines[:len(lines)/2], ""))); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	gz.Close()
	if err := os.WriteFile(filepath.Join(dir, "0.log"), []byte(strings.Join(lines[len(lines)/2:], "")), 0o640); err != nil {
		t.Fatal(err)
	}
	first := time.Date(2026, 11, 30, 21, 2, 11, 350_000_000, time.UTC) // the fixture's first line
	var asked ContainerRef
	info := func(_ context.Context, ref ContainerRef) (ContainerInfo, error) {
		asked = ref
		return ContainerInfo{Image: "vllm/vllm-openai:v0.10.2", Started: first.Add(-time.Second),
			PullStart: first.Add(-41 * time.Second), PullEnd: first.Add(-3 * time.Second)}, nil
	}
	f := newFollower(t, podLogs, filepath.Join(root, "state"), metrics.New(prometheus.NewRegistry()), state.New(nil), info)
	f.Sync()
	recs := f.Records()
	if len(recs) != 1 || recs[0].Result.CompileCache != phases.CacheHit || recs[0].Result.Outcome != phases.OutcomeReady {
		t.Fatalf("records %+v", recs)
	}
	if (asked != ContainerRef{Namespace: "default", Pod: "vllm-1", PodUID: "aa11", Container: "vllm"}) || recs[0].Image != "vllm/vllm-openai:v0.10.2" {
		t.Errorf("lookup %+v, image %q", asked, recs[0].Image)
	}
	exp := want(t, "seed-7b-warm.log")
	if pull, ok := recs[0].Result.Phase(phases.PhaseImagePull); !ok || pull != 38 {
		t.Errorf("image_pull %v %v, want 38 s", pull, ok)
	}
	if got := *recs[0].Result.TotalSeconds - *exp.TotalSeconds; got < 40.999 || got > 41.001 {
		t.Errorf("total %v, want the log's %v + 41 s from the pull start", *recs[0].Result.TotalSeconds, *exp.TotalSeconds)
	}
}

// Run discovers a pod created after it started through fsnotify alone (the rescan is an hour away).
func TestRunDiscoversNewPodsByFsnotify(t *testing.T) {
	root := t.TempDir()
	podLogs := filepath.Join(root, "pods")
	if err := os.MkdirAll(podLogs, 0o755); err != nil {
		t.Fatal(err)
	}
	store := state.New(nil)
	f, err := New(Options{Dir: podLogs, StateDir: filepath.Join(root, "state"), Settle: -1, Resync: time.Hour, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a bound, not an assertion
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	if _, err := store.WaitNewer(ctx, 0); err != nil { // first publish: Run has scanned and set its watches
		t.Fatal(err)
	}
	l := newKubeletLog(t, podLogs, "default", "vllm-2", "bb22", "vllm", 0)
	for _, line := range fixture(t, "v0.9.0.1-v1-hit.log") {
		l.write(line)
	}
	st := statetest.Wait(t, store, phases.Section, func(st phases.Status) bool { return len(st.Records) == 1 })
	if st.Records[0].Result.CompileCache != phases.CacheHit {
		t.Errorf("record %+v", st.Records[0].Result)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// phasesOf is the published phases section (zero before the first publish).
func phasesOf(store *state.Store) phases.Status {
	st, _ := phases.Section.Get(store)
	return st
}

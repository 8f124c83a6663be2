package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

const head = "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\n"

// problemsOf parses doc and returns every problem line; it fails unless doc is invalid.
func problemsOf(t *testing.T, doc string) (*ValidationError, string) {
	t.Helper()
	_, err := Parse([]byte(doc))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	return ve, err.Error()
}

func TestUnknownFieldsReportedWithEveryOtherProblem(t *testing.T) {
	ve, msg := problemsOf(t, head+`dataDir: var/lib/warmd
modles: []
models:
- name: /
  source: s3://b/m/
  revison: main
weights:
  concurrency: 2000000000
  chunksize: 1Mi
imagePull:
  resolveInterval: -1h
readiness:
  resync: -1s
phases:
  podLogDir: var/log/pods
`)
	want := []string{
		"dataDir: \"var/lib/warmd\" is not an absolute path",
		"modles: unknown field (did you mean models?)",
		"models[0].revison: unknown field (did you mean revision?)",
		"models[0].name: \"/\" the namespace is empty",
		"weights.chunksize: unknown field (did you mean chunkSize? field names are case-sensitive)",
		"weights.concurrency: 2000000000 is outside 1..256",
		"imagePull.resolveInterval: -1h0m0s is outside 10s..24h",
		"readiness.resync: -1s is outside 10s..24h",
		"phases.podLogDir: \"var/log/pods\" is not an absolute path",
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	if len(ve.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(ve.Problems), len(want), msg)
	}
}

func TestWrongTypesReportedTogether(t *testing.T) {
	ve, msg := problemsOf(t, head+`dataDir: rel
weights: {concurrency: many, budget: lots}
readiness: {resync: soon, startupTaint: maybe}
phases: {keep: 1.5}
images: {ref: x}
models:
- {name: org/a, source: 's3://b/a/', tensorParallelSize: [1]}
- just a string
- {name: org/c, source: 's3://b/c/', revision: 1234}
`)
	want := []string{
		"dataDir: \"rel\" is not an absolute path",
		"weights.concurrency: \"many\" is not a whole number in range",
		"weights.budget: \"lots\" is not a quantity (such as 16Mi or 500Gi)",
		"readiness.resync: \"soon\" is not a duration (such as 30s, 15m or 1h)",
		"readiness.startupTaint: \"maybe\" is not true or false",
		"phases.keep: 1.5 is not a whole number in range",
		"images: is a mapping, want a list",
		"models[0].tensorParallelSize: a list is not a whole number in range",
		"models[1]: is a string, want a mapping",
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q:\n%s", w, msg)
		}
	}
	// models[1] is reported once, as what it is, not again as an empty model; models[2]'s numeric
	// revision is a string as YAML users expect.
	if len(ve.Problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(ve.Problems), len(want), msg)
	}
}

func TestHostileKeysAreQuoted(t *testing.T) {
	_, msg := problemsOf(t, head+"\"evil\\nweights.concurrency: 1 is fine\\u001b[31m\": 1\n")
	if strings.Contains(msg, "\x1b") || strings.Count(msg, "\n") != 1 {
		t.Fatalf("a hostile key reached the message raw:\n%q", msg)
	}
	if !strings.Contains(msg, `unknown field`) {
		t.Fatalf("unknown key not reported: %s", msg)
	}
}

func TestNumericStringsDecodeAsStrings(t *testing.T) {
	c, err := Parse([]byte(head + "models:\n- {name: org/m, source: 's3://b/m/', revision: 1234}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Models[0].Revision != "1234" {
		t.Fatalf("revision = %q", c.Models[0].Revision)
	}
}

func TestUnreadableYAMLIsOneError(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"syntax", head + "models: [\n", "decode config"},
		{"duplicate key", head + "dataDir: /a\ndataDir: /b\n", "already set"},
		{"not a mapping", "- a\n- b\n", "not a mapping"},
		{"scalar", "hello\n", "not a mapping"},
		{"null", "~\n", "config is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want %q", err, tc.want)
			}
		})
	}
}

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestOversizedConfigRefusedBeforeReading: a 50 MB config used to cost 1.1 GB to decode. It is now
// refused from its size alone: the memory spent is bounded, not proportional to the file.
func TestOversizedConfigRefusedBeforeReading(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	line := "- {name: org/m, source: 's3://b/m/'}\n"
	if _, err := f.WriteString(head + "models:\n" + strings.Repeat(line, 50<<20/len(line))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var lerr error
	n := allocated(func() { _, lerr = Load(p) })
	if !errors.Is(lerr, ErrTooLarge) || !strings.Contains(lerr.Error(), "the limit is 1048576") {
		t.Fatalf("Load of a 50 MB config: %v, want ErrTooLarge", lerr)
	}
	if n > 1<<20 {
		t.Fatalf("refusing a 50 MB config allocated %d bytes; it must not read the file", n)
	}
	if _, err := Parse(make([]byte, MaxFileBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Parse of %d bytes: %v", MaxFileBytes+1, err)
	}
}

// TestConfigAtTheCapStillLoads: the cap refuses only what no ConfigMap can hold.
func TestConfigAtTheCapStillLoads(t *testing.T) {
	doc := head + "# " + strings.Repeat("x", MaxFileBytes-len(head)-3) + "\n"
	if len(doc) != MaxFileBytes {
		t.Fatalf("test doc is %d bytes", len(doc))
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatalf("a config of exactly the cap: %v", err)
	}
}

func TestNonRegularConfigRefusedWithoutBlocking(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", t.TempDir()} {
		done := make(chan error, 1)
		go func() { _, err := Load(p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("Load(%s) = %v, want refused as not a regular file", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Load(%s) blocked", p)
		}
	}
}

// TestAliasBombRefused: YAML aliases can expand a small file into gigabytes; the decoder must refuse
// that within the size cap, with bounded memory.
func TestAliasBombRefused(t *testing.T) {
	doc := head + `a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	var err error
	n := allocated(func() { _, err = Parse([]byte(doc)) })
	if err == nil {
		t.Fatal("alias bomb accepted")
	}
	if n > 256<<20 {
		t.Fatalf("alias bomb cost %d bytes", n)
	}
	t.Logf("refused (%d bytes allocated): %v", n, err)
}

func TestWatchRefusesOversizedReload(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	base := head
	if err := os.WriteFile(p, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Watch(ctx, p, []byte(base), 50*time.Millisecond, func(_ *NodeConfig, err error) { got <- err })
	time.Sleep(100 * time.Millisecond)
	big := base + "# " + strings.Repeat("x", 2*MaxFileBytes) + "\n"
	// Replaced whole, as a ConfigMap update is: written in place, the watcher may read the file while
	// it is still empty (truncated, not yet written) and rightly report that first.
	tmp := filepath.Join(dir, ".config.yaml.new")
	if err := os.WriteFile(tmp, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("reload of an oversized file: %v, want ErrTooLarge", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("oversized reload not reported")
	}
}

package daemon

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/config"
)

const (
	restartBegin = "<!-- BEGIN restart-needed: printed from pkg/daemon/restart.go by its test; do not edit -->\n"
	restartEnd   = "<!-- END restart-needed -->"
)

// TestRestartNeededDoc: docs/operations.md lists exactly RestartNeeded (WARMD_UPDATE_DOCS=1
// rewrites it), so the doc and the reload's warning print from one list.
func TestRestartNeededDoc(t *testing.T) {
	const doc = "../../docs/operations.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, restartBegin), strings.Index(s, restartEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no restart-needed block between %q and %q", doc, restartBegin, restartEnd)
	}
	got, want := s[i+len(restartBegin):j], RestartNeededDoc()
	if got == want {
		return
	}
	if os.Getenv("WARMD_UPDATE_DOCS") != "" {
		if err := os.WriteFile(doc, []byte(s[:i+len(restartBegin)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/operations.md's restart-needed list is not pkg/daemon's RestartNeeded (run WARMD_UPDATE_DOCS=1 go test ./pkg/daemon -run TestRestartNeededDoc):\ndoc:\n%s\nlist:\n%s", got, want)
}

// jsonPaths returns every YAML path of t's fields ("peers.maxPeers"), sections included.
func jsonPaths(t reflect.Type, prefix string, out map[string]bool) {
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonPaths(f.Type, prefix, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[prefix+name] = true
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			jsonPaths(ft, prefix+name+".", out)
		}
	}
}

// TestRestartNeededNamesRealSettings: each entry names a NodeConfig setting (found by reflection,
// as the YAML spells it), and each one's Changed fires on an edit of it and not on no edit.
func TestRestartNeededNamesRealSettings(t *testing.T) {
	paths := map[string]bool{}
	jsonPaths(reflect.TypeOf(config.NodeConfig{}), "", paths)
	edits := map[string]func(*config.NodeConfig){
		"readiness.disabled":   func(c *config.NodeConfig) { c.Readiness.Disabled = !c.Readiness.Disabled },
		"readiness.kubeconfig": func(c *config.NodeConfig) { c.Readiness.Kubeconfig += "x" },
		"readiness.resync":     func(c *config.NodeConfig) { c.Readiness.Resync.Duration += time.Second },
		"nodeName":             func(c *config.NodeConfig) { c.NodeName += "x" },
	}
	for _, r := range RestartNeeded {
		if p := strings.TrimSuffix(r.Path, ".*"); !paths[p] {
			t.Errorf("RestartNeeded names %s, which is no NodeConfig setting", r.Path)
		}
		edit := edits[r.Path]
		if edit == nil {
			t.Errorf("%s: no edit in this test to check its Changed by", r.Path)
			continue
		}
		start := &config.NodeConfig{}
		start.CompileCache.Disabled, start.Prewarm.Disabled = true, true
		next := *start
		if r.Changed(start, &next) {
			t.Errorf("%s: Changed on no edit", r.Path)
		}
		edit(&next)
		if got := AppliedAtRestart(start, &next); len(got) != 1 || got[0] != r.Path {
			t.Errorf("%s: an edit of it warns of %v, want only it", r.Path, got)
		}
	}
}

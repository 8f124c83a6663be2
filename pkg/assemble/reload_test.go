package assemble

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/peer/serve"
	"warmd.io/warmd/pkg/prefetch/images"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// rebuiltBy are the parts built from some settings, each with the function its run loop compares
// across reloads to decide a rebuild: a setting that changes one of them reaches that part.
var rebuiltBy = map[string]func(*config.NodeConfig) string{
	"images backend (pkg/prefetch/images)":  images.BackendSettings,
	"weights engine (pkg/prefetch/weights)": weights.EngineSettings,
	"compile-cache SKU tree (pkg/cache)":    cache.Settings,
	"peer server (pkg/peer/serve)":          serve.Settings,
}

// perUse are the settings read from the config in force each time they are used, rather than built
// into something: the file that reads them (checked to spell the field on a config value) and the
// test that shows a reload of it taking effect (required).
var perUse = map[string]struct{ file, reads, test string }{
	"models":                      {"pkg/prefetch/weights/manager.go", "cfg.Models", "pkg/cli TestReloadedModelIsManaged"},
	"images":                      {"pkg/prefetch/images/open.go", "cfg.Images", "pkg/prefetch/images TestManager"},
	"imagePull.concurrency":       {"pkg/prefetch/images/manager.go", "cfg.ImagePull.Concurrency", "pkg/prefetch/images TestReloadOfImagePullSettings"},
	"imagePull.onRemove":          {"pkg/prefetch/images/manager.go", "cfg.ImagePull.OnRemove", "pkg/prefetch/images TestReloadOfImagePullSettings"},
	"imagePull.resolveInterval":   {"pkg/prefetch/images/worker.go", "m.config().ImagePull.ResolveInterval", "pkg/prefetch/images TestReloadOfImagePullSettings"},
	"phases.keep":                 {"pkg/phases/follow/part.go", "c.Phases.Keep", "pkg/phases/follow TestKeepFollowsReload"},
	"phases.podLogDir":            {"pkg/phases/follow/part.go", "c.Phases.PodLogDir", "pkg/phases/follow TestPartFollowsReload"},
	"gpu.gfdLabels":               {"pkg/nvml/part.go", "cfg.GPU.GFDLabels", "pkg/nvml TestPartReconfigureGFD"},
	"prewarm.disabled":            {"pkg/prewarm/part.go", "p.cfg.Prewarm.Disabled", "pkg/prewarm TestDisabledAtStartThenEnabledByAReload"},
	"prewarm.maxBytes":            {"pkg/prewarm/part.go", "p.cfg.Prewarm.MaxBytes", "pkg/prewarm TestReloadedBudgetAppliesToTheNextRun"},
	"prewarm.memAvailablePercent": {"pkg/prewarm/part.go", "p.cfg.Prewarm.MemAvailablePercent", "pkg/prewarm TestReloadedBudgetAppliesToTheNextRun"},
	"readiness.startupTaint":      {"pkg/readiness/part.go", "cfg.Readiness.StartupTaint", "pkg/readiness TestStartupTaintFollowsReload"},
}

// notSettings are NodeConfig fields that configure nothing (the file's type, checked on load).
var notSettings = map[string]bool{"apiVersion": true, "kind": true}

// leaf is one setting: its YAML path and where it sits in NodeConfig.
type leaf struct {
	path  string
	index []int
}

var (
	durationType = reflect.TypeOf(metav1.Duration{})
	quantityType = reflect.TypeOf(resource.Quantity{})
)

// leaves walks t's fields as the YAML spells them, down to the values an operator sets.
func leaves(t reflect.Type, prefix string, index []int, out *[]leaf) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		at := append(append([]int(nil), index...), i)
		if f.Type.Kind() == reflect.Struct && f.Type != durationType && f.Type != quantityType {
			if f.Anonymous && name == "" {
				leaves(f.Type, prefix, at, out)
			} else {
				leaves(f.Type, prefix+name+".", at, out)
			}
			continue
		}
		*out = append(*out, leaf{prefix + name, at})
	}
}

// oneOf are the settings that take one of a few words: an edit picks another valid one.
var oneOf = map[string][]string{
	"weights.pageCache":  {config.PageCacheBypass, config.PageCacheKeep},
	"containerd.backend": {"auto", "containerd", "embedded"},
	"containerd.unpack":  {"warmd", "daemon", "parallel"},
	"imagePull.onRemove": {"unpin", "keep", "remove"},
}

// edit changes v (one setting) to some other value of its type (another of its words for oneOf).
func edit(t *testing.T, path string, v reflect.Value) {
	switch words := oneOf[path]; {
	case len(words) > 0:
		for _, w := range words {
			if w != v.String() {
				v.SetString(w)
				return
			}
		}
	case v.Type() == durationType:
		d := v.Addr().Interface().(*metav1.Duration)
		d.Duration += time.Second
	case v.Type() == quantityType:
		q := v.Addr().Interface().(*resource.Quantity)
		q.Add(resource.MustParse("1Ki"))
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.Kind() == reflect.Int:
		v.SetInt(v.Int() + 1)
	case v.Kind() == reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Bool:
		b := !(v.IsNil() || v.Elem().Bool())
		v.Set(reflect.ValueOf(&b))
	default:
		t.Fatalf("%s: no edit for a %s; teach this test one", path, v.Type())
	}
}

// TestEverySettingIsReloadedOrNamed walks every NodeConfig setting by reflection and edits it alone
// (issue 26 item 1). Each edit must be refused by the reload (daemon.FixedAcrossReloads), warned of
// as waiting for a restart (daemon.RestartNeeded, which docs/operations.md prints), change what a
// part is rebuilt from (rebuiltBy: the very functions the parts' loops compare), or be read from
// the config in force where it is used (perUse). A new setting in none of these fails here.
func TestEverySettingIsReloadedOrNamed(t *testing.T) {
	base := deps(t, func(*config.NodeConfig) {}).Config
	var all []leaf
	leaves(reflect.TypeOf(config.NodeConfig{}), "", nil, &all)
	seen := map[string]bool{}
	for _, l := range all {
		seen[l.path] = true
		if notSettings[l.path] {
			continue
		}
		next := cloneConfig(t, base)
		edit(t, l.path, reflect.ValueOf(next).Elem().FieldByIndex(l.index))
		var how []string
		if err := daemon.FixedAcrossReloads(base, next); err != nil {
			if !strings.Contains(err.Error(), l.path) {
				t.Errorf("%s: the reload is refused without naming it: %v", l.path, err)
			}
			how = append(how, "refused")
		}
		if later := daemon.AppliedAtRestart(base, next); len(later) > 0 {
			how = append(how, "restart")
		}
		for part, settings := range rebuiltBy {
			if settings(base) != settings(next) {
				how = append(how, part)
			}
		}
		if _, ok := perUse[l.path]; ok {
			how = append(how, "per use")
			if len(how) > 1 {
				t.Errorf("%s is listed as read per use, yet is also %v: take it off perUse", l.path, how[:len(how)-1])
			}
		}
		if len(how) == 0 {
			t.Errorf("%s: a reload that edits it is applied by no part and named nowhere: make a part apply it (and add it to perUse or a part's Settings) or add it to daemon.RestartNeeded", l.path)
		}
	}
	for p, u := range perUse {
		if !seen[p] {
			t.Errorf("perUse names %s, which is no NodeConfig setting", p)
			continue
		}
		src, err := os.ReadFile(filepath.Join("..", "..", u.file))
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if !strings.Contains(string(src), u.reads) {
			t.Errorf("%s: %s does not read %s any more", p, u.file, u.reads)
		}
		// "Read per use" is a claim about a file; the test is what shows a reload taking effect.
		dir, name, _ := strings.Cut(u.test, " ")
		switch {
		case u.test == "":
			t.Errorf("%s is read per use, but no test shows a reload of it taking effect: write one and name it here", p)
		case !testExists(t, filepath.Join("..", "..", dir), name):
			t.Errorf("%s: its reload test %s is gone", p, u.test)
		}
	}
	if len(all) < 50 {
		t.Fatalf("walked %d settings; the walk is broken", len(all))
	}
}

// testExists reports whether a _test.go file in dir declares func name.
func testExists(t *testing.T, dir, name string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "func "+name+"(") {
			return true
		}
	}
	return false
}

// cloneConfig copies c deeply (its slices and pointers too) through its JSON form, as a reload
// decodes a fresh config.
func cloneConfig(t *testing.T, c *config.NodeConfig) *config.NodeConfig {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	next := &config.NodeConfig{}
	if err := json.Unmarshal(b, next); err != nil {
		t.Fatal(err)
	}
	return next
}

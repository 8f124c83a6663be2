package assemble

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
)

func deps(t *testing.T, mut func(*config.NodeConfig)) daemon.Deps {
	t.Helper()
	dir := t.TempDir()
	cfg := &config.NodeConfig{APIVersion: config.APIVersion, Kind: config.Kind, NodeName: "n1", DataDir: dir}
	cfg.Phases.PodLogDir = filepath.Join(dir, "pods")
	cfg.Readiness.Disabled = true
	mut(cfg)
	cfg.Default()
	return daemon.Deps{Config: cfg, Store: state.New(nil), Metrics: metrics.New(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler)}
}

// TestPartsInDataFlowOrder: the parts come in data-flow order, the compile-cache part whether caches are on or
// off (then in the state "disabled"), and the model naming is handed back to follow reloads.
func TestPartsInDataFlowOrder(t *testing.T) {
	for _, tc := range []struct {
		name     string
		disabled bool
		want     string
	}{
		{"compile caches on", false, "node gpu images weights peers cache phases readiness"},
		{"compile caches off", true, "node gpu images weights peers cache phases readiness"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asm, err := Parts(deps(t, func(c *config.NodeConfig) { c.CompileCache.Disabled = tc.disabled }))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range asm.Parts {
				names = append(names, p.Name())
			}
			if got := strings.Join(names, " "); got != tc.want {
				t.Errorf("parts %q, want %q", got, tc.want)
			}
			if len(asm.Shared) != 1 {
				t.Errorf("shared reconfigurables %d, want 1 (the model naming)", len(asm.Shared))
			}
		})
	}
}

// TestAPIClientFromKubeconfig: with readiness on, the one API client is built from
// readiness.kubeconfig, and a broken one stops the set-up naming the setting.
func TestAPIClientFromKubeconfig(t *testing.T) {
	_, err := Parts(deps(t, func(c *config.NodeConfig) {
		c.Readiness.Disabled = false
		c.Readiness.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	}))
	if err == nil || !strings.Contains(err.Error(), "readiness.kubeconfig") {
		t.Fatalf("err = %v, want one naming readiness.kubeconfig", err)
	}
}

// TestOneClientForEveryPart: with readiness on, the node watcher, the phases follower's pod lookups
// and the readiness part share the one client (Deps.Kube); the node part is not ready until it has
// read the Node.
func TestOneClientForEveryPart(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	asm, err := Parts(deps(t, func(c *config.NodeConfig) { c.Readiness.Disabled, c.Readiness.Kubeconfig = false, kc }))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range asm.Parts {
		names = append(names, p.Name())
	}
	// With an API server the page-cache pre-warm runs too, between the caches and the phases.
	if got, want := strings.Join(names, " "), "node gpu images weights peers cache prewarm phases compilekey readiness"; got != want {
		t.Errorf("parts %q, want %q", got, want)
	}
	node, last := asm.Parts[0], asm.Parts[len(asm.Parts)-1]
	if node.Name() != "node" || node.Ready() == nil {
		t.Errorf("first part %s ready=%v, want the node watcher, not ready before reading the Node", node.Name(), node.Ready())
	}
	if _, ok := last.(*readiness.Part); !ok {
		t.Errorf("last part %T, want the Node-writing *readiness.Part", last)
	}
}

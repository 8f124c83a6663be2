package follow

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/phases"
)

// Unmanaged is the model label of starts whose model the config does not name.
const Unmanaged = "unmanaged"

// Models maps what a vLLM start printed as its model to a configured model name, and tells which
// configured models running pods on this node serve. Both follow config reloads: a model added by a
// ConfigMap edit is named (not "unmanaged") in its starts' records and metrics, and its running pod
// protects its weights and compile cache from eviction. The follower names starts with it; the
// weights and compile-cache parts ask it what is in use.
type Models struct {
	log *slog.Logger

	mu     sync.Mutex
	names  map[string]string
	podDir string
	cached []string
	at     time.Time
}

// NewModels returns the naming of cfg's models; Reconfigure follows reloads.
func NewModels(cfg *config.NodeConfig, log *slog.Logger) *Models {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Models{log: log}
	m.Reconfigure(cfg)
	return m
}

// Reconfigure implements daemon.Reconfigurable: the names and pod log dir of cfg apply at once.
func (m *Models) Reconfigure(cfg *config.NodeConfig) {
	names := map[string]string{}
	for _, md := range cfg.Models {
		names[md.Name] = md.Name
		if d, err := model.DirName(md.Name); err == nil {
			names[d] = md.Name
		}
		names[filepath.Base(md.Name)] = md.Name
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names, m.podDir, m.at = names, cfg.Phases.PodLogDir, time.Time{}
}

// Name is a ModelFunc: an org/name id, a path into the HF cache warmd fills, or another path whose
// base is a configured model's; everything else is Unmanaged, so metric labels stay bounded.
func (m *Models) Name(_, _ string, r phases.Result) string {
	m.mu.Lock()
	names := m.names
	m.mu.Unlock()
	return nameIn(names, r.Model)
}

func nameIn(names map[string]string, printed string) string {
	if n, ok := names[printed]; ok {
		return n
	}
	for _, part := range strings.Split(filepath.ToSlash(printed), "/") {
		if n, ok := names[part]; ok && strings.HasPrefix(part, "models--") {
			return n
		}
	}
	if n, ok := names[filepath.Base(printed)]; ok {
		return n
	}
	return Unmanaged
}

// Running returns the configured models vLLM pods on this node serve now (RunningModels over the
// pod log dir). Eviction asks once per model and per bundle, so the answer is kept for 10 s rather
// than rereading every pod's log each time; a reload drops it.
func (m *Models) Running() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.at.IsZero() && time.Since(m.at) < 10*time.Second {
		return m.cached
	}
	names := m.names
	ms, err := RunningModels(m.podDir, func(_, _ string, r phases.Result) string { return nameIn(names, r.Model) }, 500)
	if err != nil {
		m.log.Warn("cannot tell which models running pods use; eviction relies on recent use only", "err", err)
	}
	m.cached, m.at = slices.DeleteFunc(ms, func(n string) bool { return n == Unmanaged }), time.Now()
	return m.cached
}

// InUse reports whether a running pod serves model (for the weights part's eviction).
func (m *Models) InUse(model string) bool { return slices.Contains(m.Running(), model) }

package follow

import (
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/state"
)

func TestPartFromConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.NodeConfig{DataDir: dir, Phases: config.Phases{PodLogDir: filepath.Join(dir, "pods"), Keep: 3}}
	p, err := Part(nil, nil, nil)(daemon.Deps{Config: cfg, Store: state.New(nil), Metrics: metrics.New(prometheus.NewRegistry())})
	if err != nil {
		t.Fatal(err)
	}
	f, ok := p.(*Follower)
	if !ok || f.Name() != "phases" || f.opts.Keep != 3 || f.opts.StateDir != filepath.Join(dir, "state") || f.opts.Dir != cfg.Phases.PodLogDir {
		t.Errorf("part %T %+v", p, f.opts)
	}
}

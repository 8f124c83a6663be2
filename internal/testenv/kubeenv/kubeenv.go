// Package kubeenv starts a real kube-apiserver + etcd for a test package through controller-runtime's
// envtest, from the binaries `make test` builds (KUBEBUILDER_ASSETS). It is a separate package so tests
// that need no API server do not link envtest.
package kubeenv

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"warmd.io/warmd/internal/testenv"
)

// Env is a running API server.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client kubernetes.Interface
}

// Option adjusts the environment before it starts (e.g. API server flags).
type Option func(*envtest.Environment)

// Start starts an API server for t and stops it (kube-apiserver first, then etcd) when t ends.
// client-go's default QPS 5/Burst 10 would make tests crawl, so both are raised.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	assets := testenv.Assets(t)
	e := &envtest.Environment{BinaryAssetsDirectory: assets}
	for _, o := range opts {
		o(e)
	}
	cfg, err := e.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver/etcd from %s: %v", assets, err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop kube-apiserver/etcd: %v", err)
		}
	})
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for test API server: %v", err)
	}
	return &Env{Env: e, Config: cfg, Client: cs}
}

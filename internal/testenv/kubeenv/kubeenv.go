// Package kubeenv starts a real kube-apiserver + etcd for a test package through controller-runtime's
// envtest, from the binaries `make test` builds (KUBEBUILDER_ASSETS). It is a separate package so tests
// that need no API server do not link envtest.
package kubeenv

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"warmd.io/warmd/internal/testenv"
	"warmd.io/warmd/pkg/kube"
)

// Env is a running API server.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Client is warmd's narrow client (pkg/kube), the one warmd's packages take.
	Client kube.Interface
	// Clientset is client-go's whole one, for setting up what warmd never reads or writes itself
	// (service accounts and their tokens, secrets, deployments).
	Clientset kubernetes.Interface
}

// Option adjusts the environment before it starts (e.g. API server flags).
type Option func(*envtest.Environment)

// Start starts an API server for t and stops it (kube-apiserver first, then etcd) when t ends.
// client-go's default QPS 5/Burst 10 would make tests crawl, so both are raised.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	assets := testenv.Assets(t)
	// envtest's 20 s per component is not enough on a 2-core CI machine running every package at once
	// (a restarted kube-apiserver timed out there); a slow start is not what these tests test.
	e := &envtest.Environment{BinaryAssetsDirectory: assets,
		ControlPlaneStartTimeout: 2 * time.Minute, ControlPlaneStopTimeout: time.Minute}
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
	cs, err := kube.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for test API server: %v", err)
	}
	full, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset for test API server: %v", err)
	}
	return &Env{Env: e, Config: cfg, Client: cs, Clientset: full}
}

// Kubeconfig adds a user of the API server in the system:masters group and writes a kubeconfig for
// it into dir (t.TempDir() when empty); it returns the file's path, for a command or a daemon under
// test to be given with --kubeconfig.
func (e *Env) Kubeconfig(t testing.TB, user, dir string) string {
	t.Helper()
	u, err := e.Env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("add API server user %s: %v", user, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatalf("kubeconfig for %s: %v", user, err)
	}
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

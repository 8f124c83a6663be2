package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsNameTheFix checks that each way a config is not found says what to set, and that the
// daemon's loader never falls back to $KUBECONFIG (root's ambient config) when its setting is empty.
func TestErrorsNameTheFix(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", good)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	if _, err := ForDaemon("", "readiness.kubeconfig"); err == nil || !strings.Contains(err.Error(), "set readiness.kubeconfig") {
		t.Errorf("ForDaemon(\"\") outside a pod with $KUBECONFIG set: err %v, want the in-cluster error naming the setting", err)
	}
	if _, err := ForDaemon(filepath.Join(dir, "missing"), "readiness.kubeconfig"); err == nil || !strings.Contains(err.Error(), "fix readiness.kubeconfig") {
		t.Errorf("ForDaemon(missing): err %v, want one naming the setting", err)
	}
	c, err := ForDaemon(good, "readiness.kubeconfig")
	if err != nil || c.Host != "https://127.0.0.1:6443" {
		t.Fatalf("ForDaemon(good) = %v, %v", c, err)
	}
	// The commands find $KUBECONFIG as kubectl does.
	if c, err := ForCommand(""); err != nil || c.Host != "https://127.0.0.1:6443" {
		t.Fatalf("ForCommand(\"\") with $KUBECONFIG = %v, %v", c, err)
	}
	if _, err := ForCommand(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("ForCommand(missing): err %v, want one naming --kubeconfig", err)
	}
}

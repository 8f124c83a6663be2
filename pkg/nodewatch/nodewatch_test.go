package nodewatch

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/config"
)

// TestOffWithoutAPIServer: without an API server the Node is known at once with no labels, so only
// models without a nodeSelector are wanted, and the part is ready from the start.
func TestOffWithoutAPIServer(t *testing.T) {
	w := Off("n")
	if err := w.Ready(); err != nil {
		t.Errorf("Off not ready: %v", err)
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "big"}}
	if wanted, known := w.Wants(config.Model{Name: "a/b"}); !wanted || !known {
		t.Errorf("model without selector: wanted=%v known=%v", wanted, known)
	}
	if wanted, known := w.Wants(config.Model{Name: "a/b", NodeSelector: sel}); wanted || !known {
		t.Errorf("model with selector: wanted=%v known=%v", wanted, known)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestWantedBeforeTheNodeIsRead: a watcher that has not read its Node is not ready, knows nothing,
// and Wanted holds back selected models only.
func TestWantedBeforeTheNodeIsRead(t *testing.T) {
	w := New(nil, "n")
	if w.Ready() == nil {
		t.Error("ready before the Node was read")
	}
	if _, known := w.Wants(config.Model{Name: "a/b"}); known {
		t.Error("known before the Node was read")
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "big"}}
	if !w.Wanted(config.Model{Name: "a/b"}) || w.Wanted(config.Model{Name: "c/d", NodeSelector: sel}) {
		t.Error("Wanted before the Node: want every model without a selector and none with one")
	}
}

package extender

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/predict"
)

// BenchmarkPrioritizeHandler measures one nodeCacheCapable /prioritize over 5,000 Nodes loaded into
// the Index from a generated list (no API server, no network): the handler's own cost.
func BenchmarkPrioritizeHandler(b *testing.B) {
	ix := NewIndex()
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("bench-gpu-%05d", i)
		ann, _ := predict.Annotation([]predict.Prediction{{Model: m7b, Seconds: float64(60 + i%400)}}, 0)
		ix.Upsert(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[i], ResourceVersion: "1",
			Labels: map[string]string{model.LabelKey(m7b): "warm"}, Annotations: map[string]string{nodelabels.AnnotationPredicted: ann}}})
	}
	h := New(Config{}, ix, nil, slog.New(slog.NewTextHandler(io.Discard, nil))).Handler()
	body := argsBody(b, vllmPod(m7b), nil, names)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/prioritize", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

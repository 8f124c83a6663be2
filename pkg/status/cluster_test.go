package status

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/model"
)

// TestClusterRowsLabelOnlyModels: a model the Node has a label for but no status annotation names (the
// annotation was trimmed to its size cap) gets a row with the label's state, whether its key is
// readable (org--name → org/name) or hashed (a long id, which its name cannot be read back from: the
// row is named as extender.LabelName reads the key).
func TestClusterRowsLabelOnlyModels(t *testing.T) {
	long := "org/" + strings.Repeat("very-long-model-name-", 4) + "7B"
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		model.LabelKey("org/short"): "warm",
		model.LabelKey(long):        "weights",
	}}}
	rows := ClusterRows([]corev1.Node{node}, ClusterFilter{})
	got := map[string]string{}
	for _, r := range rows {
		got[r.Model] = r.State
	}
	hashedName := extender.LabelName(model.LabelKey(long))
	if len(rows) != 2 || got["org/short"] != "warm" || got[hashedName] != "weights" {
		t.Fatalf("rows %v, want org/short warm and %s weights", got, hashedName)
	}
	// The filter by label-key name finds the hashed one.
	keyName := strings.TrimPrefix(model.LabelKey(long), model.LabelPrefix)
	if rows := ClusterRows([]corev1.Node{node}, ClusterFilter{Model: keyName}); len(rows) != 1 || rows[0].State != "weights" {
		t.Errorf("filtered rows %+v", rows)
	}
}

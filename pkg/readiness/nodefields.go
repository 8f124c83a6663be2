package readiness

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"warmd.io/warmd/pkg/nodelabels"
)

// metadataOwners reads the Node's managedFields and returns, for one metadata map ("labels" or
// "annotations"), the keys warmd's apply owns and, per key, the other managers that own it too.
// warmd needs both: what it owns tells what an apply would remove; what others own tells which keys
// it must leave alone rather than fight over.
func metadataOwners(n *corev1.Node, field string) (ours map[string]bool, others map[string][]string) {
	ours, others = map[string]bool{}, map[string][]string{}
	for _, mf := range n.ManagedFields {
		if mf.FieldsV1 == nil || mf.Subresource != "" {
			continue
		}
		var f map[string]map[string]map[string]json.RawMessage
		if err := json.Unmarshal(mf.FieldsV1.Raw, &f); err != nil {
			continue // another shape (e.g. a list at this path) cannot hold our keys
		}
		for fk := range f["f:metadata"]["f:"+field] {
			k, ok := strings.CutPrefix(fk, "f:")
			if !ok {
				continue
			}
			if mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
				ours[k] = true
			} else {
				others[k] = append(others[k], mf.Manager)
			}
		}
	}
	return ours, others
}

// conflictKeys pulls the label and annotation keys out of a server-side-apply conflict error.
func conflictKeys(err error) (labels, annotations []string) {
	var se apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &se) || se.Status().Details == nil {
		return nil, nil
	}
	for _, c := range se.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		if k, ok := strings.CutPrefix(c.Field, ".metadata.labels."); ok {
			labels = append(labels, k)
		} else if k, ok := strings.CutPrefix(c.Field, ".metadata.annotations."); ok {
			annotations = append(annotations, k)
		}
	}
	return labels, annotations
}

// findCondition returns the node's condition of type t, or nil.
func findCondition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// hasColdTaint reports whether the node carries warmd's startup taint.
func hasColdTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == nodelabels.TaintCold && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// newer reports whether a is a later version of the Node than b. resourceVersions are opaque by
// contract, but the API server serves etcd revisions, which are numbers; when either does not parse
// the latest one seen wins.
func newer(a, b *corev1.Node) bool {
	if b == nil {
		return true
	}
	if a == nil {
		return false
	}
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	if errA != nil || errB != nil {
		return true
	}
	return ra >= rb
}

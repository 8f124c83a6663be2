package extender

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"warmd.io/warmd/pkg/model"
	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/predict"
)

// NodeInfo is what the extender needs from one Node, parsed once per Node version so a request never
// parses JSON per node.
type NodeInfo struct {
	Name            string
	ResourceVersion string
	SKU             string
	// States maps a per-model label key (models.warmd.io/<key>) to its value (warm, weights, …).
	States map[string]string
	// Predicted maps model ids to predicted seconds, from warmd.io/predicted-ready.
	Predicted map[string]float64
	// PredictErr is set when the annotation could not be parsed; the node then has no predictions.
	PredictErr error
	// Unschedulable is set for a cordoned Node (spec.unschedulable) and for one whose Ready
	// condition is False or Unknown: no new replica lands there, so it counts for no cluster-wide
	// lead time. A Node without a Ready condition yet (just registered) is not excluded.
	Unschedulable bool
}

// State returns the node's warm state for a model ("" when warmd publishes none for it).
func (n *NodeInfo) State(id string) string { return n.States[model.LabelKey(id)] }

// failed reports whether warmd says the model failed on this Node.
func (n *NodeInfo) failed(model string) bool { return n.State(model) == string(nodelabels.StateFailed) }

// Info parses what the extender needs from a Node.
func Info(node *corev1.Node) *NodeInfo {
	n := &NodeInfo{Name: node.Name, ResourceVersion: node.ResourceVersion, SKU: node.Labels[nodelabels.LabelSKU]}
	n.Unschedulable = node.Spec.Unschedulable
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			n.Unschedulable = true
		}
	}
	for k, v := range node.Labels {
		if strings.HasPrefix(k, model.LabelPrefix) {
			if n.States == nil {
				n.States = map[string]string{}
			}
			n.States[k] = v
		}
	}
	n.Predicted, n.PredictErr = predict.ParseAnnotation(node.Annotations[nodelabels.AnnotationPredicted])
	return n
}

// Index holds the parsed view of every Node, kept current by the informer's event handlers.
type Index struct {
	mu    sync.RWMutex
	nodes map[string]*NodeInfo
	// names maps label keys back to the model ids seen in predictions, for metric labels.
	names map[string]string
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{nodes: map[string]*NodeInfo{}, names: map[string]string{}}
}

// Upsert records a Node's current version.
func (ix *Index) Upsert(node *corev1.Node) {
	n := Info(node)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.nodes[n.Name] = n
	for m := range n.Predicted {
		k := model.LabelKey(m)
		if _, ok := ix.names[k]; !ok {
			ix.names[k] = m
		}
	}
}

// Delete forgets a Node.
func (ix *Index) Delete(name string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.nodes, name)
}

// Get returns the parsed Node, if the informer has seen it.
func (ix *Index) Get(name string) (*NodeInfo, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n, ok := ix.nodes[name]
	return n, ok
}

// info returns the parsed form of a Node the scheduler sent: the index's when it holds the same
// version, a fresh parse otherwise.
func (ix *Index) info(node *corev1.Node) *NodeInfo {
	if n, ok := ix.Get(node.Name); ok && n.ResourceVersion == node.ResourceVersion && node.ResourceVersion != "" {
		return n
	}
	return Info(node)
}

// Len is how many Nodes the index holds.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.nodes)
}

// WarmNodes counts, per model, the Nodes whose models.warmd.io label says warm. Models are named by
// their id when a prediction named it, else by labelName (org--name → org/name).
func (ix *Index) WarmNodes() map[string]int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := map[string]int{}
	for _, n := range ix.nodes {
		for k, v := range n.States {
			name := ix.modelName(k)
			if v == string(nodelabels.StateWarm) {
				out[name]++
			} else if _, ok := out[name]; !ok {
				out[name] = 0 // a model no node has warm yet is 0, not a missing series
			}
		}
	}
	return out
}

// FastestReady is, per model, the lowest predicted time-to-ready over the Nodes a new replica could
// land on: how soon the cluster could have one more replica without adding a node. Nodes where the
// model failed, cordoned Nodes and NotReady Nodes are skipped (their predictions are not a lead time
// anybody gets); a model only such Nodes predict has no series.
func (ix *Index) FastestReady() map[string]float64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := map[string]float64{}
	for _, n := range ix.nodes {
		if n.Unschedulable {
			continue
		}
		for m, s := range n.Predicted {
			if n.failed(m) {
				continue
			}
			if cur, ok := out[m]; !ok || s < cur {
				out[m] = s
			}
		}
	}
	return out
}

func (ix *Index) modelName(key string) string {
	if m, ok := ix.names[key]; ok {
		return m
	}
	return LabelName(key)
}

// LabelName names the model of a models.warmd.io key without the config: the id for a readable key
// (model.NameFromLabelKey), else the key's name part (a long or odd id's hashed key, which no id can be
// read back from).
func LabelName(key string) string {
	if m, ok := model.NameFromLabelKey(key); ok {
		return m
	}
	return strings.TrimPrefix(key, model.LabelPrefix)
}

package readiness

import (
	"fmt"
	"slices"
	"strings"

	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/predict"
)

// Input is everything the warm-state rules look at, as the other parts report it right now. The daemon
// builds it from the state snapshot; this package defines it so the rules do not depend on the parts'
// own status types.
type Input struct {
	// SKU is this node's GPU SKU key (pkg/nvml); empty when the node has no GPU or it is unknown.
	SKU string
	// IdentityLabels are pkg/nvml's GPU identity labels. Only keys under warmd.io/ are published.
	IdentityLabels map[string]string
	// CompileCacheEnabled is false when compile-cache management is off; a model then needs no cache.
	CompileCacheEnabled bool
	// Models lists every configured model, wanted by this node or not.
	Models []ModelInput
	// Predictions are the predicted seconds from pod start to ready per wanted model, with the value of
	// the warmd.io/predicted-ready annotation that carries them to the scheduler extender and autoscalers
	// (pkg/predict builds both; empty when there is nothing to predict).
	Predictions Predictions
}

// Predictions is what readiness publishes about time-to-ready. Detail is shown in /v1/status as is
// (nil when there is nothing to predict).
type Predictions struct {
	Seconds    map[string]float64
	Annotation string
	Detail     *predict.Status
}

// ModelInput is one model's facts as verified by the parts.
type ModelInput struct {
	// Name is the model id from the config ("Qwen/Qwen2.5-7B-Instruct").
	Name string
	// Wants is true when the model's nodeSelector selects this node. Unwanted models get no label.
	Wants   bool
	Image   ImageFacts
	Weights WeightsFacts
	Cache   CacheFacts
	// LastStart is the last vLLM start of this model seen by pkg/phases, nil before the first.
	LastStart *StartFacts
}

// ImageFacts is what the image part verified in containerd.
type ImageFacts struct {
	// Ref is the configured image; empty means the model needs no image of its own.
	Ref string
	// Digest is the manifest digest present in containerd now; empty when absent.
	Digest string
	// Pinned is true when the image carries the pin label, so the kubelet's GC will not evict it.
	Pinned bool
	// Error is the last failure to pull or pin, empty when none.
	Error string
}

// WeightsFacts is what the weights part verified on disk.
type WeightsFacts struct {
	// Revision is the configured revision.
	Revision string
	// VerifiedRevision is the revision whose files are on disk and verified now; empty when none.
	VerifiedRevision string
	// Path is the snapshot dir pods mount.
	Path string
	// Error is the last failure to fetch or verify, empty when none.
	Error string
}

// CacheFacts is what the compile-cache part found for this node's SKU.
type CacheFacts struct {
	// Present is true when a verified compile cache for this model and SKU is on disk.
	Present bool
	// Error is the last failure to restore the cache, empty when none.
	Error string
}

// StartFacts summarises the last observed start.
type StartFacts struct {
	// CacheHit is true when that start reused the compile cache instead of compiling.
	CacheHit bool
}

// ModelState is the evaluated warm state of one wanted model.
type ModelState struct {
	Name  string           `json:"-"`
	State nodelabels.State `json:"s"`
	// Missing names, for people, each thing between this model and warm.
	Missing []string `json:"miss,omitempty"`
	// Reason is the failure, for nodelabels.StateFailed, in warmd's own words (reason.go): which part failed and
	// how, never the part's error text, since it is written on the Node. The text is in the part's
	// section of /v1/status.
	Reason   string `json:"err,omitempty"`
	Digest   string `json:"img,omitempty"`
	Revision string `json:"rev,omitempty"`
	// LastStartCacheHit reports the last start's compile-cache outcome; nil before the first start.
	LastStartCacheHit *bool `json:"hit,omitempty"`
}

// Evaluate turns the parts' facts into the warm state of each wanted model, sorted by name. A model is
// warm only when everything it needs is verified now: the image present and pinned (when it has one),
// the configured revision verified on disk, and a compile cache for this SKU (when caches are on).
// A failure in any part makes the model failed with that part's reason, even if other parts are done,
// because an operator has to act on it.
func Evaluate(in Input) []ModelState {
	out := make([]ModelState, 0, len(in.Models))
	for _, m := range in.Models {
		if !m.Wants {
			continue
		}
		out = append(out, evaluateModel(in, m))
	}
	slices.SortFunc(out, func(a, b ModelState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func evaluateModel(in Input, m ModelInput) ModelState {
	ms := ModelState{Name: m.Name, Digest: m.Image.Digest}
	if m.LastStart != nil {
		hit := m.LastStart.CacheHit
		ms.LastStartCacheHit = &hit
	}
	var failures []string
	imageOK := true
	if m.Image.Ref != "" {
		switch {
		case m.Image.Error != "":
			failures = append(failures, "image "+m.Image.Ref+": "+classify(imagePhrases, m.Image.Error))
			imageOK = false
		case m.Image.Digest == "":
			ms.Missing = append(ms.Missing, "image "+m.Image.Ref+" not pulled")
			imageOK = false
		case !m.Image.Pinned:
			ms.Missing = append(ms.Missing, "image "+m.Image.Ref+" not pinned")
			imageOK = false
		}
	}
	weightsOK := m.Weights.VerifiedRevision != "" && m.Weights.VerifiedRevision == m.Weights.Revision
	if weightsOK {
		ms.Revision = m.Weights.VerifiedRevision
	}
	switch {
	case m.Weights.Error != "":
		failures = append(failures, "weights: "+classify(weightsPhrases, m.Weights.Error))
		weightsOK = false
	case !weightsOK && m.Weights.VerifiedRevision != "":
		ms.Missing = append(ms.Missing, fmt.Sprintf("weights at revision %s (on disk: %s)", m.Weights.Revision, m.Weights.VerifiedRevision))
	case !weightsOK:
		ms.Missing = append(ms.Missing, fmt.Sprintf("weights at revision %s", m.Weights.Revision))
	}
	cacheOK := true
	if in.CompileCacheEnabled {
		switch {
		case m.Cache.Error != "":
			failures = append(failures, "compile cache: "+classify(cachePhrases, m.Cache.Error))
			cacheOK = false
		case !m.Cache.Present:
			sku := in.SKU
			if sku == "" {
				sku = "unknown SKU"
			}
			ms.Missing = append(ms.Missing, "compile cache for "+sku)
			cacheOK = false
		}
	}
	switch {
	case len(failures) > 0:
		ms.State, ms.Reason = nodelabels.StateFailed, strings.Join(failures, "; ")
	case imageOK && weightsOK && cacheOK:
		ms.State = nodelabels.StateWarm
	case weightsOK:
		ms.State = nodelabels.StateWeights
	case imageOK && m.Image.Ref != "":
		ms.State = nodelabels.StateImage
	default:
		ms.State = nodelabels.StateCold
	}
	return ms
}

// AllWarm reports whether every wanted model is warm. A node that wants no model is warm: there is
// nothing to wait for, and a startup taint must not stay on it forever.
func AllWarm(states []ModelState) bool {
	for _, s := range states {
		if s.State != nodelabels.StateWarm {
			return false
		}
	}
	return true
}

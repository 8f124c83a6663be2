// Package fromstate turns the node-state snapshot the parts publish into readiness's Input. It is the
// one place that knows every part's status type, so pkg/readiness's rules stay independent of them and
// the parts stay independent of each other.
package fromstate

import (
	"warmd.io/warmd/pkg/cache"
	"warmd.io/warmd/pkg/compilekey/check"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/phases"
	"warmd.io/warmd/pkg/predict"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/state"
)

var _ readiness.InputFunc = Input

// Input builds readiness's view of every configured model from the snapshot.
//
// The compile-cache requirement: a model needs a compile cache only on a node whose GPU SKU can key one
// (nvml.Cacheable: not on CPU nodes or when NVML cannot tell the SKU), and then it is met once the cache
// part has finished syncing this SKU's tree (state ready for the same SKU): everything the fleet has
// captured for this SKU is on disk. A fleet that has never compiled for this SKU has nothing to restore,
// so the first node is not held cold forever; the start that follows records a miss, and pkg/phases and
// the status show it.
func Input(snap state.Snapshot, cfg *config.NodeConfig, wants func(config.Model) bool) readiness.Input {
	gpu, _ := nvml.Section.From(snap)
	images, _ := prefetch.ImagesSection.From(snap)
	weights, _ := prefetch.WeightsSection.From(snap)
	cc, haveCache := cache.Section.From(snap)
	starts, _ := phases.Section.From(snap)

	in := readiness.Input{
		IdentityLabels:      gpu.Labels,
		CompileCacheEnabled: !cfg.CompileCache.Disabled && gpu.Cacheable,
	}
	if gpu.Cacheable {
		in.SKU = gpu.Inventory.SKU
	}
	cacheSynced := haveCache && cc.State == cache.StateReady && cc.SKU == in.SKU
	for _, m := range cfg.Models {
		mi := readiness.ModelInput{
			Name:    m.Name,
			Wants:   wants == nil || wants(m),
			Weights: readiness.WeightsFacts{Revision: m.Revision},
		}
		if m.Image != "" {
			mi.Image.Ref = m.Image
			if im, ok := images.ForModel(m.Name); ok {
				if im.Warm() {
					mi.Image.Digest, mi.Image.Pinned = im.Digest, im.Pinned
				}
				if im.State == prefetch.StateFailed {
					mi.Image.Error = im.Reason
				}
			}
		}
		if ws, ok := weights.Model(m.Name); ok {
			if ws.Verified(m.Name, m.Revision) {
				mi.Weights.VerifiedRevision, mi.Weights.Path = ws.Revision, ws.SnapshotPath
			}
			if ws.State == prefetch.StateFailed {
				mi.Weights.Error = ws.Reason
			}
		}
		if in.CompileCacheEnabled {
			mi.Cache.Present = cacheSynced
			if haveCache && cc.State == cache.StateError {
				mi.Cache.Error = cc.Message
			}
		}
		for _, r := range starts.Records { // newest first
			if r.Model == m.Name {
				mi.LastStart = &readiness.StartFacts{CacheHit: r.Result.CompileCache == phases.CacheHit}
				break
			}
		}
		in.Models = append(in.Models, mi)
	}
	keys, _ := check.Section.From(snap)
	in.Predictions = predictions(in, cfg.NodeName, images, weights, cc, cacheSynced, starts, keys)
	return in
}

// predictions estimates time-to-ready for every wanted model from what is on disk now, this node's
// recorded starts, the download rates it measured, and the compile-cache key check of a pod that is
// about to start.
func predictions(in readiness.Input, node string, images prefetch.ImagesStatus, weights prefetch.WeightsStatus,
	cc cache.Status, cacheSynced bool, starts phases.Status, keys check.Status) readiness.Predictions {
	var sits []predict.Situation
	for _, m := range in.Models {
		if !m.Wants {
			continue
		}
		s := predict.Situation{Model: m.Name, Node: node, SKU: in.SKU, Cache: phases.CacheMiss,
			ImageLocal: m.Image.Ref == "" || m.Image.Digest != "", WeightsLocal: m.Weights.VerifiedRevision != ""}
		if im, ok := images.ForModel(m.Name); ok {
			s.ImageBytes = im.TotalBytes
		}
		if ws, ok := weights.Model(m.Name); ok {
			s.WeightsBytes = ws.BytesTotal
		}
		if in.CompileCacheEnabled && cacheSynced && cc.Bytes > 0 {
			s.Cache = phases.CacheHit
		}
		// A pod of the model bound here and not started yet was compared with the starts that left
		// the node's graphs: its hit or miss is more specific than "a cache is on disk".
		if c, ok := keys.ForModel(m.Name); ok && in.CompileCacheEnabled {
			s.Cache, s.CacheReason = phases.CompileCache(c.Predicted), c.Reason
		}
		sits = append(sits, s)
	}
	if len(sits) == 0 {
		return readiness.Predictions{}
	}
	var transfers []predict.Transfer
	for _, ws := range weights.Models {
		if ws.State == prefetch.StateReady && !ws.Started.IsZero() && ws.Finished.After(ws.Started) {
			transfers = append(transfers, predict.Transfer{Bytes: ws.BytesTotal, Seconds: ws.Finished.Sub(ws.Started).Seconds()})
		}
	}
	p := predict.Predictor{History: predict.FromRecords(node, starts.Records)}
	st, ann, err := p.PredictAll(sits, predict.Throughput{WeightsBytesPerSecond: predict.MedianRate(transfers)})
	if err != nil {
		ann = "" // an unencodable prediction is left off the Node rather than written half
	}
	out := readiness.Predictions{Seconds: map[string]float64{}, Annotation: ann, Detail: &st}
	for _, pr := range st.Predictions {
		out.Seconds[pr.Model] = pr.Seconds
	}
	return out
}

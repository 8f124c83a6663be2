package phases

import "time"

// result turns the milestones into phases. A phase exists only when the log timed both of its ends;
// nothing is interpolated. Milestones that every rank prints use the slowest rank (critical path).
func (e *events) result(opts Options, include map[string]bool) Result {
	r := Result{
		Source: opts.Source, VLLMVersion: e.version, Engine: e.engine, TensorParallelSize: e.tp, Model: e.model,
		Args:            e.args,
		CompileCacheDir: firstNonEmpty(e.aotDir, e.cacheDir), CompileCache: e.verdict(e.merged(nil)),
	}
	if r.TensorParallelSize == 0 && e.sawConfig {
		r.TensorParallelSize = 1 // vLLM's default: the args and config it printed do not set it
	}
	if m := reHashDir.FindStringSubmatch(r.CompileCacheDir); m != nil {
		r.CompileCacheHash = m[1]
	}
	r.Reported = Reported{
		WeightsDownloadSeconds: e.download.value(), WeightsLoadSeconds: e.weights.value(),
		ModelLoadSeconds: e.model_.value(), DynamoTransformSeconds: e.dynamo.value(),
		TorchCompileSeconds: e.compile.value(), GraphCaptureSeconds: e.capture.value(),
		InitEngineSeconds: e.initEngine.value(),
	}
	mk := e.merged(include)
	// An offline LLM run has no server: it is up when its engine is, and it shows that by submitting
	// its prompts (a server never prints those bars).
	offline := !mk.appReady.ok && !mk.listening.ok && mk.offline.ok
	ready := mk.appReady.ok || mk.listening.ok || offline
	failed := false
	switch {
	case ready:
		r.Outcome = OutcomeReady
	case e.fail.failed:
		r.Outcome, failed = OutcomeFailed, true
		r.Error = e.fail.reason()
	default:
		r.Outcome = OutcomeIncomplete
	}

	t0 := mk.start
	if !opts.Start.IsZero() && t0.ok && opts.Start.Before(t0.t) && t0.t.Sub(opts.Start) < 24*time.Hour {
		t0 = milestone{t: opts.Start, ok: true}
	}
	if !t0.ok {
		return r
	}
	r.StartedAt = t0.t
	origin := t0
	pull := [2]milestone{{t: opts.PullStart, ok: !opts.PullStart.IsZero()}, {t: opts.PullEnd, ok: !opts.PullEnd.IsZero()}}
	if pull[0].ok && pull[1].ok && !pull[1].t.Before(pull[0].t) && !pull[1].t.After(t0.t) && t0.t.Sub(pull[0].t) < 24*time.Hour {
		origin = pull[0] // the waterfall and the total start with the pull
	} else {
		pull[0].ok = false
	}
	rel := func(t time.Time) float64 { return t.Sub(origin.t).Seconds() }
	add := func(name string, pieces ...[2]milestone) {
		var ph Phase
		for _, pc := range pieces {
			a, b := pc[0], pc[1]
			if !a.ok || !b.ok || b.t.Before(a.t) {
				continue
			}
			if len(ph.pieces) == 0 {
				ph.Start = rel(a.t)
			}
			ph.pieces = append(ph.pieces, [2]float64{rel(a.t), rel(b.t)})
			ph.Seconds += b.t.Sub(a.t).Seconds()
		}
		if len(ph.pieces) > 0 {
			ph.Name = name
			r.Phases = append(r.Phases, ph)
		}
	}
	span := func(a, b milestone) [2]milestone { return [2]milestone{a, b} }

	add(PhaseImagePull, pull)
	add(PhaseImports, span(t0, mk.engineInit))
	add(PhaseEngineStart, span(mk.engineInit, mk.loadStart))
	if mk.downloadDone.ok {
		add(PhaseWeightsDownload, span(mk.loadStart, mk.downloadDone))
		add(PhaseWeightLoad, span(mk.downloadDone, mk.modelLoaded))
	} else {
		add(PhaseWeightLoad, span(mk.loadStart, mk.modelLoaded))
	}
	add(PhaseTorchCompile, span(mk.modelLoaded, mk.compileDone))
	kvStart := mk.modelLoaded
	if mk.compileDone.ok {
		kvStart = mk.compileDone
	}
	capStart := mk.captureStart
	if mk.captureDone.ok && mk.captureHasSecs {
		// vLLM's "Graph capturing finished in N secs" places the capture's start. No line marks it:
		// tqdm's first bar is written with the line before it (or, under CRI, when the bar's line
		// ends), so it would swallow the quiet FlashInfer autotune/JIT that precedes the capture
		// and belongs to kv_cache_and_warmup. N is rounded to the second: the start is kept after
		// the KV cache was sized (which precedes the capture) and after compile.
		byN := mk.captureDone.t.Add(-time.Duration(mk.captureSecs * float64(time.Second)))
		if !capStart.ok || capStart.t.Sub(byN).Abs() > time.Second {
			// A bar that agrees with N to the second is kept: on a sub-second clock it is the finer mark.
			capStart = milestone{t: byN, ok: true}
		}
		floor := kvStart
		if mk.kvDone.ok && !mk.kvDone.t.After(mk.captureDone.t) && (!floor.ok || mk.kvDone.t.After(floor.t)) {
			floor = mk.kvDone
		}
		if floor.ok && capStart.t.Before(floor.t) {
			capStart.t = floor.t
		}
	}
	engineDone := mk.initDone
	if !engineDone.ok {
		engineDone = mk.captureDone
	}
	if !engineDone.ok {
		engineDone = mk.kvDone
	}
	if capStart.ok && mk.captureDone.ok {
		add(PhaseKVCacheAndWarmup, span(kvStart, capStart), span(mk.captureDone, engineDone))
		add(PhaseGraphCapture, span(capStart, mk.captureDone))
	} else {
		add(PhaseKVCacheAndWarmup, span(kvStart, engineDone))
	}
	up := mk.appReady
	if !up.ok {
		up = mk.listening
	}
	if offline {
		up = mk.offline
		if engineDone.ok && !engineDone.t.After(up.t) {
			up = engineDone
		}
	}
	if !offline {
		add(PhaseServerUp, span(engineDone, up))
	}
	add(PhaseFirstHealth, span(up, mk.health))
	switch {
	case ready:
		end := up
		if mk.health.ok && mk.health.t.After(end.t) {
			end = mk.health
		}
		total := end.t.Sub(origin.t).Seconds()
		r.TotalSeconds = &total
	case failed && mk.failAt.ok && !mk.failAt.t.Before(origin.t):
		total := mk.failAt.t.Sub(origin.t).Seconds() // process start → the first line saying it failed
		r.TotalSeconds = &total
	}
	return r
}

// merged combines the milestones of the included clock domains: the earliest of those that mark a
// start, the latest (slowest rank) of those every rank prints. A nil include takes every domain.
func (e *events) merged(include map[string]bool) marks {
	var out marks
	for dom, dm := range e.dom {
		if include != nil && !include[dom] {
			continue
		}
		c := *dm
		c.fill() // on a copy: a summary line read later still replaces a bound
		m := &c
		for _, f := range []struct {
			dst, src *milestone
			first    bool
		}{
			{&out.start, &m.start, true}, {&out.engineInit, &m.engineInit, true}, {&out.loadStart, &m.loadStart, false},
			{&out.downloadDone, &m.downloadDone, false}, {&out.modelLoaded, &m.modelLoaded, false},
			{&out.compileDone, &m.compileDone, false}, {&out.captureStart, &m.captureStart, true},
			{&out.kvDone, &m.kvDone, false}, {&out.initDone, &m.initDone, false}, {&out.listening, &m.listening, true},
			{&out.appReady, &m.appReady, true}, {&out.health, &m.health, true}, {&out.failAt, &m.failAt, true},
			{&out.offline, &m.offline, true},
		} {
			if !f.src.ok {
				continue
			}
			if f.first && (!f.dst.ok || f.src.t.Before(f.dst.t)) || !f.first && (!f.dst.ok || f.src.t.After(f.dst.t)) {
				*f.dst = *f.src
			}
		}
		if m.captureDone.ok && (!out.captureDone.ok || m.captureDone.t.After(out.captureDone.t)) {
			out.captureDone, out.captureSecs, out.captureHasSecs = m.captureDone, m.captureSecs, m.captureHasSecs
		}
	}
	return out
}

func (e *events) verdict(mk marks) CompileCache {
	switch {
	case e.cacheOff || e.eager:
		return CacheDisabled
	case e.miss:
		return CacheMiss
	case e.hit:
		return CacheHit
	case e.engine == "v0" && !mk.compileDone.ok && (mk.initDone.ok || mk.captureDone.ok || mk.kvDone.ok):
		return CacheDisabled // V0 without torch.compile: the engine got past where it would have compiled
	}
	return CacheUnknown
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

package phases

import "time"

// result turns the milestones into phases. A phase exists only when the log timed both of its ends;
// nothing is interpolated. Milestones that every rank prints use the slowest rank (critical path).
func (e *events) result(opts Options) Result {
	r := Result{
		Source: opts.Source, VLLMVersion: e.version, Engine: e.engine, TensorParallelSize: e.tp, Model: e.model,
		CompileCacheDir: e.cacheDir, CompileCache: e.verdict(),
	}
	if m := reHashDir.FindStringSubmatch(e.cacheDir); m != nil {
		r.CompileCacheHash = m[1]
	}
	r.Reported = Reported{
		WeightsDownloadSeconds: e.download.value(), WeightsLoadSeconds: e.weights.value(),
		ModelLoadSeconds: e.model_.value(), DynamoTransformSeconds: e.dynamo.value(),
		TorchCompileSeconds: e.compile.value(), GraphCaptureSeconds: e.capture.value(),
		InitEngineSeconds: e.initEngine.value(),
	}
	ready := e.appReady.ok || e.listening.ok
	switch {
	case ready:
		r.Outcome = OutcomeReady
	case e.failed:
		r.Outcome = OutcomeFailed
		r.Error = firstNonEmpty(e.errLine, e.fatalLine, e.errorLevel)
	default:
		r.Outcome = OutcomeIncomplete
	}

	t0 := e.start
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
	add(PhaseImports, span(t0, e.engineInit))
	add(PhaseEngineStart, span(e.engineInit, e.loadStart))
	if e.downloadDone.ok {
		add(PhaseWeightsDownload, span(e.loadStart, e.downloadDone))
		add(PhaseWeightLoad, span(e.downloadDone, e.modelLoaded))
	} else {
		add(PhaseWeightLoad, span(e.loadStart, e.modelLoaded))
	}
	add(PhaseTorchCompile, span(e.modelLoaded, e.compileDone))
	kvStart := e.modelLoaded
	if e.compileDone.ok {
		kvStart = e.compileDone
	}
	capStart := e.captureStart
	if !capStart.ok && e.captureDone.ok && r.Reported.GraphCaptureSeconds != nil {
		// vLLM's own clock has no sub-second part and tqdm lines no time: place the start by the
		// seconds vLLM printed (a number the log itself states).
		capStart = milestone{t: e.captureDone.t.Add(-time.Duration(*r.Reported.GraphCaptureSeconds * float64(time.Second))), ok: true}
	}
	engineDone := e.initDone
	if !engineDone.ok {
		engineDone = e.captureDone
	}
	if !engineDone.ok {
		engineDone = e.kvDone
	}
	if capStart.ok && e.captureDone.ok {
		add(PhaseKVCacheAndWarmup, span(kvStart, capStart), span(e.captureDone, engineDone))
		add(PhaseGraphCapture, span(capStart, e.captureDone))
	} else {
		add(PhaseKVCacheAndWarmup, span(kvStart, engineDone))
	}
	up := e.appReady
	if !up.ok {
		up = e.listening
	}
	add(PhaseServerUp, span(engineDone, up))
	add(PhaseFirstHealth, span(up, e.health))
	if ready {
		end := up
		if e.health.ok && e.health.t.After(end.t) {
			end = e.health
		}
		total := end.t.Sub(origin.t).Seconds()
		r.TotalSeconds = &total
	}
	return r
}

func (e *events) verdict() CompileCache {
	switch {
	case e.cacheOff || e.eager:
		return CacheDisabled
	case e.miss:
		return CacheMiss
	case e.hit:
		return CacheHit
	case e.engine == "v0" && !e.compileDone.ok && (e.initDone.ok || e.captureDone.ok || e.kvDone.ok):
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

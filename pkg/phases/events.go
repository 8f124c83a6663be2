package phases

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Message patterns, from the reference's §2 table (format strings per version).
var (
	reAPIBanner = regexp.MustCompile(`vLLM API server version (\S+)`)
	reServerNew = regexp.MustCompile(`vLLM server version ([^,\s]+), serving model (\S+)`)
	// The ASCII-art logo (2026-01+) prints "version <v>" and "model <m>" beside block characters, in
	// whichever file logs it (utils.py, api_utils.py, a DEBUG-mode relative path).
	reLogoVersion = regexp.MustCompile(`[█▄▀]\s+version\s+(v?\d[\w.+-]*)`)
	reLogoModel   = regexp.MustCompile(`[█▄▀]\s+model\s+(\S+)`)
	reEngineInit  = regexp.MustCompile(`Initializing (?:a (V0|V1) |an )LLM engine \(v([^)\s]+)\) with config: (.*)`)
	reCfgModel    = regexp.MustCompile(`(?:^|[\s,(])model='([^']*)'`)
	reCfgTP       = regexp.MustCompile(`tensor_parallel_size=(\d+)`)
	reArgModel    = regexp.MustCompile(`'model(?:_tag)?': '([^']*)'`)
	reArgTP       = regexp.MustCompile(`'tensor_parallel_size': (\d+)`)
	reLoadStart   = regexp.MustCompile(`Starting to load model (.*?)\.\.\.`)
	reDownload    = regexp.MustCompile(`Time spent downloading weights for .*: ([\d.]+) seconds`)
	reWeightsTook = regexp.MustCompile(`Loading weights took ([\d.]+) seconds`)
	reModelTook   = regexp.MustCompile(`Model loading took \S+ (?:GB|GiB)(?: memory)? and ([\d.]+) seconds`)
	reCacheDir    = regexp.MustCompile(`Using cache directory: (\S+) for vLLM's torch\.compile`)
	reAOTLoad     = regexp.MustCompile(`Directly load AOT compilation from path (\S+)`)
	reAOTSave     = regexp.MustCompile(`saved AOT compiled function to (\S+)`)
	reAOTRetry    = regexp.MustCompile(`(?:Compiling model again due to a load failure from|Cannot load aot compilation from path) ([^\s,]+)`)
	reHashDir     = regexp.MustCompile(`(?:torch_compile_cache|torch_aot_compile)/([0-9a-f]{6,64})`)
	reDynamo      = regexp.MustCompile(`Dynamo bytecode transform time: ([\d.]+) s`)
	reCompileTot  = regexp.MustCompile(`torch\.compile (?:takes|took) ([\d.]+) s in total`)
	reGraphDone   = regexp.MustCompile(`Graph capturing finished in ([\d.]+) secs`)
	reInitEngine  = regexp.MustCompile(`init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s`)
	reHealth200   = regexp.MustCompile(`"GET /health HTTP/[\d.]+" 200`)
)

// milestone is the time of an event: first or last occurrence across ranks.
type milestone struct {
	t  time.Time
	ok bool
}

func (m *milestone) first(t time.Time) {
	if !m.ok {
		m.t, m.ok = t, true
	}
}

// latest keeps the slowest rank's occurrence: the critical path waits for it.
func (m *milestone) latest(t time.Time) {
	if !m.ok || t.After(m.t) {
		m.t, m.ok = t, true
	}
}

// perRank collects a reported number per rank (process prefix); the result is the slowest rank's.
type perRank struct {
	v   map[string]float64
	sum bool // sum a rank's lines (one per compiled submodule) instead of taking its max
}

func (r *perRank) add(rank string, v float64) {
	if r.v == nil {
		r.v = map[string]float64{}
	}
	if cur, ok := r.v[rank]; ok {
		if r.sum {
			v += cur
		} else {
			v = max(v, cur)
		}
	}
	r.v[rank] = v
}

func (r *perRank) value() *float64 {
	if len(r.v) == 0 {
		return nil
	}
	var m float64
	for _, v := range r.v {
		m = max(m, v)
	}
	return &m
}

// marks are the milestones one clock domain printed (see domains.go).
type marks struct {
	start, engineInit, loadStart, downloadDone, modelLoaded, compileDone milestone
	captureStart, captureDone, kvDone, initDone, listening, appReady     milestone
	health                                                               milestone
	// captureSecs is what vLLM printed with the latest captureDone ("Graph capturing finished in N
	// secs"): it places the capture's start, which no line marks.
	captureSecs    float64
	captureHasSecs bool
	// failAt is the first line that said the start failed.
	failAt milestone
	// weightsEnd is the last line saying a rank's weights are loaded; offline the first line of an
	// offline run's prompts; trans the domain's stage changes (stages.go).
	weightsEnd, offline milestone
	trans               []transition
}

// events accumulates what the lines said.
type events struct {
	version, engine, model string
	args                   string // the "non-default args: …" / "args: Namespace(…)" message
	tp                     int
	sawConfig              bool // the args or the engine config was printed (TP defaults to 1 then)
	cacheDir, aotDir       string
	hit, miss, cacheOff    bool
	eager                  bool
	ready                  bool // the server came up: nothing moves the startup milestones after that

	dom map[string]*marks

	download, weights, model_, dynamo, compile, capture, initEngine perRank

	fail failure
}

func newEvents() events {
	return events{dynamo: perRank{sum: true}, compile: perRank{sum: true}, dom: map[string]*marks{}, fail: newFailure()}
}

func (e *events) marks(dom string) *marks {
	m := e.dom[dom]
	if m == nil {
		m = &marks{}
		e.dom[dom] = m
	}
	return m
}

func num(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && f >= 0 && f < 1e9
}

// clip bounds a line quoted into a Result (its error) and makes it safe to show: control characters
// (a terminal escape a hostile log could carry) become spaces, and it is cut to 300 bytes.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, reANSI.ReplaceAllString(s, ""))
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// observe classifies one message of process proc in clock domain dom. ok says whether t is usable.
func (e *events) observe(p *Parser, in inner, proc, dom string, t time.Time, ok bool) {
	msg := in.msg
	m := e.marks(dom)
	at := func(ms *milestone, first bool) {
		if !ok || e.ready && ms != &m.health {
			return // after ready nothing moves the startup milestones
		}
		if first {
			ms.first(t)
		} else {
			ms.latest(t)
		}
	}
	if ok {
		m.start.first(t)
	}
	report := func(r *perRank, re *regexp.Regexp) bool {
		if mm := re.FindStringSubmatch(msg); mm != nil {
			if v, good := num(mm[1]); good {
				r.add(proc, v)
			}
			return true
		}
		return false
	}
	api := func() { p.cl.markPrimary(dom) }
	if e.fail.observe(in, proc) {
		at(&m.failAt, true)
	}
	if st := stageOf(msg); st != stNone && ok && !e.ready {
		m.enter(st, t)
		if st == stServer && reOffline.MatchString(strings.TrimSpace(msg)) {
			at(&m.offline, true)
		}
	}
	if reWeightsEnd.MatchString(msg) {
		at(&m.weightsEnd, false)
	}

	switch {
	case strings.Contains(msg, "Automatically detected platform"):
		p.vllm = true
	case reServerNew.MatchString(msg):
		mm := reServerNew.FindStringSubmatch(msg)
		p.vllm = true
		api()
		setOnce(&e.version, strings.TrimPrefix(mm[1], "v"))
		setOnce(&e.model, mm[2])
	case reAPIBanner.MatchString(msg):
		p.vllm = true
		api()
		setOnce(&e.version, strings.TrimPrefix(reAPIBanner.FindStringSubmatch(msg)[1], "v"))
	case reLogoVersion.MatchString(msg):
		p.vllm = true
		api()
		setOnce(&e.version, strings.TrimPrefix(reLogoVersion.FindStringSubmatch(msg)[1], "v"))
	case reLogoModel.MatchString(msg):
		setOnce(&e.model, reLogoModel.FindStringSubmatch(msg)[1])
	case reEngineInit.MatchString(msg):
		mm := reEngineInit.FindStringSubmatch(msg)
		p.vllm = true
		eng := strings.ToLower(mm[1])
		if eng == "" { // "Initializing an LLM engine": V1 printed it from v1/engine/core.py (≤ v0.7.0)
			eng = "v0"
			if strings.HasPrefix(in.file, "core.py") {
				eng = "v1"
			}
		}
		setOnce(&e.engine, eng)
		setOnce(&e.version, mm[2])
		e.config(mm[3])
		at(&m.engineInit, true)
	case strings.HasPrefix(msg, "non-default args: ") || strings.HasPrefix(msg, "args: "):
		api()
		setOnce(&e.args, msg)
		if mm := reArgModel.FindStringSubmatch(msg); mm != nil {
			setOnce(&e.model, mm[1])
		}
		if mm := reArgTP.FindStringSubmatch(msg); mm != nil && e.tp == 0 {
			e.tp, _ = strconv.Atoi(mm[1])
		}
		if strings.Contains(msg, "'enforce_eager': True") {
			e.eager = true
		}
		e.config(msg) // "args: Namespace(model='…', tensor_parallel_size=2, …)" (≤ v0.8.5)
	case reLoadStart.MatchString(msg):
		p.vllm = true
		setOnce(&e.model, reLoadStart.FindStringSubmatch(msg)[1])
		at(&m.loadStart, false)
	case report(&e.download, reDownload):
		at(&m.downloadDone, false)
	case report(&e.weights, reWeightsTook):
	case report(&e.model_, reModelTook):
		at(&m.modelLoaded, false)
	case strings.Contains(msg, "Loading model weights took"): // ≤ v0.7.3: a memory figure, not seconds
		at(&m.modelLoaded, false)
	case reCacheDir.MatchString(msg):
		setOnce(&e.cacheDir, reCacheDir.FindStringSubmatch(msg)[1])
	case strings.Contains(msg, "vLLM's torch.compile cache is disabled"):
		e.cacheOff = true
	case report(&e.dynamo, reDynamo):
	case reAOTLoad.MatchString(msg): // an AOT artefact was loaded: the compile cache hit
		e.hit = true
		setOnce(&e.aotDir, reAOTLoad.FindStringSubmatch(msg)[1])
	case reAOTSave.MatchString(msg): // compiled and saved: a miss that filled the cache
		e.miss = true
		setOnce(&e.aotDir, reAOTSave.FindStringSubmatch(msg)[1])
	case reAOTRetry.MatchString(msg): // the artefact was there but unusable: compiled again
		e.miss = true
		setOnce(&e.aotDir, reAOTRetry.FindStringSubmatch(msg)[1])
	case strings.Contains(msg, "Compiling a graph for"), strings.Contains(msg, "Cache the graph"):
		e.miss = true
	case strings.Contains(msg, "Directly lookup the graph for shape"), strings.Contains(msg, "Directly load the compiled graph"):
		e.hit = true
	case report(&e.compile, reCompileTot):
		at(&m.compileDone, false)
	case strings.Contains(msg, "Capturing CUDA graph"), strings.Contains(msg, "Capturing cudagraphs"),
		strings.Contains(msg, "Capturing the model for CUDA graphs"):
		at(&m.captureStart, true)
	case reGraphDone.MatchString(msg):
		v, good := num(reGraphDone.FindStringSubmatch(msg)[1])
		if good {
			e.capture.add(proc, v)
		}
		if ok && !e.ready && (!m.captureDone.ok || !t.Before(m.captureDone.t)) {
			m.captureDone = milestone{t: t, ok: true}
			m.captureSecs, m.captureHasSecs = v, good
		}
	case strings.Contains(msg, "# GPU blocks:"), strings.Contains(msg, "# cuda blocks:"), strings.Contains(msg, "GPU KV cache size:"),
		strings.Contains(msg, "Maximum concurrency for"):
		at(&m.kvDone, false)
	case report(&e.initEngine, reInitEngine):
		at(&m.initDone, false)
	case strings.Contains(msg, "Starting vLLM API server"), strings.Contains(msg, "Starting vLLM server on"),
		strings.Contains(msg, "Uvicorn running on"), reEmbeddedReady.MatchString(msg):
		api()
		at(&m.listening, true)
	case strings.Contains(msg, "Application startup complete"):
		api()
		at(&m.appReady, true)
		if ok {
			e.ready = true
		}
	case reHealth200.MatchString(msg):
		if m.appReady.ok || m.listening.ok {
			at(&m.health, true)
		}
	}
}

// config reads model, TP and eager mode from an engine config or an args Namespace.
func (e *events) config(s string) {
	e.sawConfig = true
	if mm := reCfgModel.FindStringSubmatch(s); mm != nil {
		setOnce(&e.model, mm[1])
	}
	if mm := reCfgTP.FindStringSubmatch(s); mm != nil && e.tp == 0 {
		e.tp, _ = strconv.Atoi(mm[1])
	}
	if strings.Contains(s, "enforce_eager=True") {
		e.eager = true
	}
}

func setOnce(dst *string, v string) {
	if *dst == "" {
		*dst = strings.TrimSpace(v)
	}
}

package phases

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Message patterns, from the reference's §2 table (format strings per version).
var (
	reAPIBanner   = regexp.MustCompile(`vLLM API server version (\S+)`)
	reServerNew   = regexp.MustCompile(`vLLM server version ([^,\s]+), serving model (\S+)`)
	reLogoVersion = regexp.MustCompile(`\bversion\s+(v?\d[\w.+-]*)`)
	reLogoModel   = regexp.MustCompile(`\bmodel\s+(\S+)`)
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
	reHashDir     = regexp.MustCompile(`(?:torch_compile_cache|torch_aot_compile)/([0-9a-f]{6,64})`)
	reDynamo      = regexp.MustCompile(`Dynamo bytecode transform time: ([\d.]+) s`)
	reCompileTot  = regexp.MustCompile(`torch\.compile (?:takes|took) ([\d.]+) s in total`)
	reGraphDone   = regexp.MustCompile(`Graph capturing finished in ([\d.]+) secs`)
	reInitEngine  = regexp.MustCompile(`init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s`)
	reHealth200   = regexp.MustCompile(`"GET /health HTTP/[\d.]+" 200`)
	reException   = regexp.MustCompile(`^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)`)
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

// events accumulates what the lines said.
type events struct {
	version, engine, model string
	tp                     int
	cacheDir               string
	hit, miss, cacheOff    bool
	eager                  bool

	start, engineInit, loadStart, downloadDone, modelLoaded, compileDone milestone
	captureStart, captureDone, kvDone, initDone, listening, appReady     milestone
	health                                                               milestone

	download, weights, model_, dynamo, compile, capture, initEngine perRank

	inTraceback bool
	failed      bool
	errLine     string // first exception line in a traceback
	fatalLine   string // first fatal marker line
	errorLevel  string // first ERROR/CRITICAL line
}

func newEvents() events {
	return events{dynamo: perRank{sum: true}, compile: perRank{sum: true}}
}

func num(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && f >= 0 && f < 1e9
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// observe classifies one message. ok says whether t is usable.
func (e *events) observe(p *Parser, in inner, t time.Time, ok bool) {
	msg := in.msg
	at := func(m *milestone, first bool) {
		if !ok || e.appReady.ok && m != &e.health {
			return // after ready nothing moves the startup milestones
		}
		if first {
			m.first(t)
		} else {
			m.latest(t)
		}
	}
	if ok {
		e.start.first(t)
	}
	rank := in.proc
	report := func(r *perRank, re *regexp.Regexp) bool {
		if m := re.FindStringSubmatch(msg); m != nil {
			if v, good := num(m[1]); good {
				r.add(rank, v)
			}
			return true
		}
		return false
	}
	e.errors(in)

	switch {
	case strings.Contains(msg, "Automatically detected platform"):
		p.vllm = true
	case reServerNew.MatchString(msg):
		m := reServerNew.FindStringSubmatch(msg)
		p.vllm = true
		setOnce(&e.version, strings.TrimPrefix(m[1], "v"))
		setOnce(&e.model, m[2])
	case reAPIBanner.MatchString(msg):
		p.vllm = true
		setOnce(&e.version, strings.TrimPrefix(reAPIBanner.FindStringSubmatch(msg)[1], "v"))
	case strings.HasPrefix(in.file, "api_utils.py") && reLogoVersion.MatchString(msg):
		p.vllm = true
		setOnce(&e.version, strings.TrimPrefix(reLogoVersion.FindStringSubmatch(msg)[1], "v"))
	case strings.HasPrefix(in.file, "api_utils.py") && reLogoModel.MatchString(msg):
		setOnce(&e.model, reLogoModel.FindStringSubmatch(msg)[1])
	case reEngineInit.MatchString(msg):
		m := reEngineInit.FindStringSubmatch(msg)
		p.vllm = true
		eng := strings.ToLower(m[1])
		if eng == "" { // "Initializing an LLM engine": V1 printed it from v1/engine/core.py (≤ v0.7.0)
			eng = "v0"
			if strings.HasPrefix(in.file, "core.py") {
				eng = "v1"
			}
		}
		setOnce(&e.engine, eng)
		setOnce(&e.version, m[2])
		if mm := reCfgModel.FindStringSubmatch(m[3]); mm != nil {
			setOnce(&e.model, mm[1])
		}
		if mm := reCfgTP.FindStringSubmatch(m[3]); mm != nil && e.tp == 0 {
			e.tp, _ = strconv.Atoi(mm[1])
		}
		if strings.Contains(m[3], "enforce_eager=True") {
			e.eager = true
		}
		at(&e.engineInit, true)
	case strings.HasPrefix(msg, "non-default args: ") || strings.HasPrefix(msg, "args: "):
		if mm := reArgModel.FindStringSubmatch(msg); mm != nil {
			setOnce(&e.model, mm[1])
		} else if mm := reCfgModel.FindStringSubmatch(msg); mm != nil {
			setOnce(&e.model, mm[1])
		}
		if mm := reArgTP.FindStringSubmatch(msg); mm != nil && e.tp == 0 {
			e.tp, _ = strconv.Atoi(mm[1])
		} else if mm := reCfgTP.FindStringSubmatch(msg); mm != nil && e.tp == 0 {
			e.tp, _ = strconv.Atoi(mm[1])
		}
		if strings.Contains(msg, "'enforce_eager': True") || strings.Contains(msg, "enforce_eager=True") {
			e.eager = true
		}
	case reLoadStart.MatchString(msg):
		p.vllm = true
		setOnce(&e.model, reLoadStart.FindStringSubmatch(msg)[1])
		at(&e.loadStart, false)
	case report(&e.download, reDownload):
		at(&e.downloadDone, false)
	case report(&e.weights, reWeightsTook):
	case report(&e.model_, reModelTook):
		at(&e.modelLoaded, false)
	case strings.Contains(msg, "Loading model weights took"): // ≤ v0.7.3: a memory figure, not seconds
		at(&e.modelLoaded, false)
	case reCacheDir.MatchString(msg):
		setOnce(&e.cacheDir, reCacheDir.FindStringSubmatch(msg)[1])
	case strings.Contains(msg, "vLLM's torch.compile cache is disabled"):
		e.cacheOff = true
	case report(&e.dynamo, reDynamo):
	case strings.Contains(msg, "Compiling a graph for"), strings.Contains(msg, "Cache the graph"),
		strings.Contains(msg, "Compiling model again due to a load failure"):
		e.miss = true
	case reAOTLoad.MatchString(msg):
		e.hit = true
		setOnce(&e.cacheDir, reAOTLoad.FindStringSubmatch(msg)[1])
	case strings.Contains(msg, "Directly lookup the graph for shape"), strings.Contains(msg, "Directly load the compiled graph"):
		e.hit = true
	case report(&e.compile, reCompileTot):
		at(&e.compileDone, false)
	case strings.Contains(msg, "Capturing CUDA graph"), strings.Contains(msg, "Capturing cudagraphs"),
		strings.Contains(msg, "Capturing the model for CUDA graphs"):
		at(&e.captureStart, true)
	case report(&e.capture, reGraphDone):
		at(&e.captureDone, false)
	case strings.Contains(msg, "# GPU blocks:"), strings.Contains(msg, "GPU KV cache size:"),
		strings.Contains(msg, "Maximum concurrency for"):
		at(&e.kvDone, false)
	case report(&e.initEngine, reInitEngine):
		at(&e.initDone, false)
	case strings.Contains(msg, "Starting vLLM API server"), strings.Contains(msg, "Starting vLLM server on"),
		strings.Contains(msg, "Uvicorn running on"):
		at(&e.listening, true)
	case strings.Contains(msg, "Application startup complete"):
		at(&e.appReady, true)
	case reHealth200.MatchString(msg):
		if e.appReady.ok || e.listening.ok {
			at(&e.health, true)
		}
	}
}

// errors tracks tracebacks and fatal markers; only the first of each kind is kept.
func (e *events) errors(in inner) {
	msg := strings.TrimRight(in.msg, " ")
	switch {
	case strings.HasPrefix(strings.TrimSpace(msg), "Traceback (most recent call last)"):
		e.inTraceback = true
		return
	case e.inTraceback && reException.MatchString(msg):
		e.inTraceback = false
		e.failed = true
		if e.errLine == "" {
			e.errLine = clip(msg)
		}
		return
	}
	for _, marker := range []string{
		"EngineCore failed to start", "Engine core initialization failed", "Engine process failed to start",
		"CUDA out of memory", "died unexpectedly",
	} {
		if strings.Contains(msg, marker) {
			e.failed = true
			if e.fatalLine == "" {
				e.fatalLine = clip(msg)
			}
			return
		}
	}
	if (in.level == "ERROR" || in.level == "CRITICAL") && e.errorLevel == "" && strings.TrimSpace(msg) != "" {
		e.errorLevel = clip(msg)
	}
}

func setOnce(dst *string, v string) {
	if *dst == "" {
		*dst = strings.TrimSpace(v)
	}
}

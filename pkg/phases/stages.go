package phases

import (
	"regexp"
	"strings"
	"time"
)

// Stages bound phases when the summary lines are missing. The CUDA path prints a line that ends each
// phase ("Model loading took", "torch.compile takes … in total", "init engine … took"); other backends
// and front ends (CPU, TPU, ROCm, out-of-tree platform plugins, vLLM inside another server, offline
// LLM runs, older versions) print some of them or none. Every backend still logs something in each
// stage, so where a summary line is missing the phase ends at the first line of the next stage: the
// log's own timestamps bound it, nothing is interpolated. The stage markers below are the words each
// stage's lines share across versions and platforms, not whole messages.
type stage uint8

const (
	stNone    stage = iota
	stLoad          // weights are found, downloaded and loaded
	stCompile       // torch.compile (Dynamo, Inductor, the compile cache)
	stWarmup        // memory profiling, KV cache sizing, warm-up and XLA precompile, graph capture
	stServer        // the engine is up: the front end starts serving (or an offline run submits prompts)
)

var (
	reStageLoad = regexp.MustCompile(`^(?:Starting to load model|Loading (?:model|weights|safetensors|pt checkpoint|checkpoint|the model)|` +
		`Using model weights format|Downloading (?:weights|model)|Prefetching checkpoint|Filling up model weights|Load(?:ing)? weights? from)`)
	// weightsEnd lines close the load stage where no "Model loading took" follows (CPU, TPU, plugins).
	reWeightsEnd = regexp.MustCompile(`Loading (?:model )?weights took|^Init model \||Model loading took|Loading model weights took`)
	reStageComp  = regexp.MustCompile(`Using cache directory: .*torch\.compile|Dynamo bytecode transform|Compiling a graph for|` +
		`Directly load (?:the compiled graph|AOT)|saved AOT compiled|Cache the graph|torch\.compile (?:takes|took)|Compiling model again`)
	reStageWarm = regexp.MustCompile(`# [A-Za-z]+ blocks:|KV cache (?:size|memory)|Available KV cache memory|Memory profiling takes|` +
		`Maximum concurrency for|Compiling the model with different input shapes|Compilation finished in|Warming up|warmup|` +
		`Precompile|Capturing (?:CUDA|cuda|the model)|Graph capturing finished|init engine \(|profil(?:e|ing) run`)
	reStageServer = regexp.MustCompile(`Starting vLLM (?:API )?server|Available routes|^Route: |Uvicorn running on|Started server process|` +
		`Waiting for application startup|Application startup complete|Supported_?tasks|Using supplied chat template|` +
		`default chat (?:template|sampling params)|Started (?:HTTPService|GRPCInferenceService|Metrics Service) at|Deployed app|` +
		`^Adding requests|^Processed prompts|^Rendering prompts`)
	// Offline LLM runs (no API server): the engine is up when the first prompts are submitted.
	reOffline = regexp.MustCompile(`^(?:Adding requests|Processed prompts|Rendering prompts)`)
	// Front ends that embed vLLM serve through their own server: its "listening" lines mark ready.
	reEmbeddedReady = regexp.MustCompile(`Started (?:HTTPService|GRPCInferenceService) at|Deployed app '|Application '[^']*' is ready`)
)

// stageOf classifies a message into its stage, stNone when it marks none.
func stageOf(msg string) stage {
	msg = strings.TrimSpace(msg)
	switch {
	case reWeightsEnd.MatchString(msg):
		return stNone // a load's last line, not a stage's first (marks.weightsEnd)
	case reStageServer.MatchString(msg):
		return stServer
	case reStageComp.MatchString(msg):
		return stCompile
	case reStageWarm.MatchString(msg):
		return stWarmup
	case reStageLoad.MatchString(msg):
		return stLoad
	}
	return stNone
}

// transition is when one clock domain's lines moved to another stage.
type transition struct {
	s stage
	t time.Time
}

// maxTransitions bounds the stage changes kept per domain (a hostile log alternating stages).
const maxTransitions = 512

// enter records that a line of stage s was timed at t in this domain.
func (m *marks) enter(s stage, t time.Time) {
	if s == stNone {
		return
	}
	if n := len(m.trans); n > 0 && m.trans[n-1].s == s {
		return
	}
	if len(m.trans) < maxTransitions {
		m.trans = append(m.trans, transition{s, t})
	}
}

// firstAfter returns the first transition at or after from (any time when from is unset) into a
// stage that want accepts.
func (m *marks) firstAfter(from milestone, want func(stage) bool) milestone {
	for _, tr := range m.trans {
		if (!from.ok || !tr.t.Before(from.t)) && want(tr.s) {
			return milestone{t: tr.t, ok: true}
		}
	}
	return milestone{}
}

// fill bounds, from the stage transitions, the milestones no summary line marked (see stage).
func (m *marks) fill() {
	if !m.loadStart.ok {
		m.loadStart = m.firstAfter(m.engineInit, func(s stage) bool { return s == stLoad })
	}
	switch {
	case m.modelLoaded.ok:
	case m.weightsEnd.ok && (!m.loadStart.ok || !m.weightsEnd.t.Before(m.loadStart.t)):
		m.modelLoaded = m.weightsEnd // a log that starts part-way still has the load's end
	case m.loadStart.ok:
		m.modelLoaded = m.firstAfter(m.loadStart, func(s stage) bool { return s > stLoad })
	}
	if !m.compileDone.ok && m.modelLoaded.ok {
		// Compiled right after the load without a "torch.compile takes" line: compile ends at the
		// first line of the next stage. A compile inside the warm-up (CPU, after the KV cache was
		// sized) stays part of kv_cache_and_warmup: no line splits the two there.
		for i, tr := range m.trans {
			if tr.t.Before(m.modelLoaded.t) || tr.s == stLoad {
				continue
			}
			if tr.s == stCompile && i+1 < len(m.trans) {
				m.compileDone = milestone{t: m.trans[i+1].t, ok: true}
			}
			break
		}
	}
	if !m.initDone.ok && !m.captureDone.ok {
		// No line says the engine is done: the front end's first line after the warm-up does.
		from := m.modelLoaded
		if m.compileDone.ok {
			from = m.compileDone
		}
		if m.kvDone.ok && (!from.ok || m.kvDone.t.After(from.t)) {
			from = m.kvDone
		}
		if from.ok {
			if up := m.firstAfter(from, func(s stage) bool { return s == stServer }); up.ok {
				m.initDone = up
			}
		}
	}
}

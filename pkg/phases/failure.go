package phases

import (
	"regexp"
	"strings"
)

var (
	reException = regexp.MustCompile(`^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)`)
	// pydantic's header line ("1 validation error for ModelConfig") says only that validation failed;
	// the indented line after it ("  Value error, <what is wrong> [type=value_error, …]") says why.
	reValidation = regexp.MustCompile(`ValidationError: \d+ validation errors? for `)
	// The detail is the first indented line; a long message continues on more lines, and its
	// "[type=…, input_value=…]" tail (which quotes the args) may come at the end of any of them.
	reValidationDetail = regexp.MustCompile(`^\s+(?:Value error, |Assertion failed, )?(.+?)(?:\s+\[type=.*)?$`)
)

// wrapperMarks are in exceptions that only point at another one: the root cause printed before them
// (vLLM's engine-startup wrappers, a failed model-inspection subprocess).
var wrapperMarks = []string{
	"Engine core initialization failed", "root cause above", "stack trace above", "stack trace for the root cause",
	"check the logs for more details", "CalledProcessError", "EngineDeadError", "Engine process failed to start",
	"validation error for ", "Call to collective_rpc method failed",
}

// fatalMarks are lines that say the start failed when no exception says why.
var fatalMarks = []string{
	"EngineCore failed to start", "Engine core initialization failed", "Engine process failed to start",
	"CUDA out of memory", "died unexpectedly",
}

// A process that dies without a Python traceback leaves two kinds of line. A cause says what went
// wrong in the process (the signal's reason, the collective that hung, the device fault, the C++
// exception's what()); a death only says that a process is gone (a shell's or a supervisor's note, a
// bare "Killed"). The error is the first cause, else the first death; either makes the start failed.
var (
	reCause = regexp.MustCompile(`Fatal Python error: |^Segmentation fault|SIGSEGV|SIGBUS|SIGILL|SIGFPE|` +
		`Watchdog caught collective operation timeout|NCCL (?:error|WARN .*(?:timeout|failure))|ncclSystemError|ncclInternalError|` +
		`Memory access fault by GPU|HW Exception by GPU|GPU Hang|Xid \d+|GPU has fallen off the bus|` +
		`^\s*what\(\):\s+\S|^terminate called after throwing|` +
		`Out of memory: Killed process|Memory cgroup out of memory|OOMKilled|killed due to memory pressure`)
	reDeath = regexp.MustCompile(`(?:^|\s)Aborted(?: \(core dumped\))?(?:\s|$)|\(core dumped\)|^Killed$|\bKilled\s+\S.*(?:python|vllm)|` +
		`died, exit code: -?\d+|exited with (?:exit )?code -?\d+|killed by signal|terminated by signal|` +
		`received signal SIG(?:KILL|SEGV|ABRT|BUS|TERM)|exit code:? (?:-(?:6|9|11)|13[479])\b|` +
		`A worker died or was killed|The actor died unexpectedly|Worker exit type: SYSTEM_ERROR|worker died \(-?\d+\)`)
)

// maxTracebackProcs bounds the per-process traceback state a hostile log can create.
const maxTracebackProcs = 256

// failure picks the line that says why a start failed: the first exception that is not a wrapper
// (a pydantic ValidationError resolved to its detail line), else the first wrapper, else the first
// cause of a death without a traceback, else the first fatal marker, else the first death, else the
// first ERROR line.
type failure struct {
	inTraceback map[string]bool // per process: its lines are a traceback's body
	validation  map[string]bool // per process: the next "[type=" line is a ValidationError's detail
	field       string          // the field line a ValidationError detail is about, if any
	failed      bool
	root        string
	wrapper     string
	fatal       string
	cause       string // a death's reason, when no exception gave one (reCause)
	death       string // a process is gone and nothing said why (reDeath)
	errorLevel  string
}

func newFailure() failure {
	return failure{inTraceback: map[string]bool{}, validation: map[string]bool{}}
}

func isWrapper(msg string) bool {
	for _, w := range wrapperMarks {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

func setState(m map[string]bool, proc string, v bool) {
	if !v {
		delete(m, proc)
	} else if m[proc] || len(m) < maxTracebackProcs {
		m[proc] = true
	}
}

// observe reads one line of process proc; it reports whether this line is the first to say that the
// start failed.
func (f *failure) observe(in inner, proc string) bool {
	msg := strings.TrimRight(in.msg, " ")
	was := f.failed
	if f.validation[proc] {
		if m := reValidationDetail.FindStringSubmatch(msg); m != nil && strings.HasPrefix(msg, " ") {
			setState(f.validation, proc, false)
			if f.root == "" {
				f.root = clip(strings.TrimPrefix(f.field+": ", ": ") + m[1])
			}
			return false
		}
		if t := strings.TrimSpace(msg); t != "" && !strings.HasPrefix(msg, " ") && len(t) < 100 && !strings.Contains(t, " ") {
			f.field = t // "max_model_len" before "  Input should be …"
		}
	}
	switch {
	case strings.HasPrefix(strings.TrimSpace(msg), "Traceback (most recent call last)"),
		strings.HasPrefix(msg, `  File "`) && strings.Contains(msg, `", line `):
		// A frame line starts a traceback body too: pasted logs often begin inside one.
		setState(f.inTraceback, proc, true)
		return false
	case f.inTraceback[proc] && reException.MatchString(msg):
		setState(f.inTraceback, proc, false)
		f.failed = true
		f.exception(msg, proc)
		return !was
	}
	if reCause.MatchString(msg) {
		f.failed = true
		// "terminate called after throwing an instance of 'c10::Error'" names only the type; the
		// "  what():  CUDA error: …" line after it says what happened.
		if f.cause == "" || strings.HasPrefix(f.cause, "terminate called") && strings.HasPrefix(strings.TrimSpace(msg), "what():") {
			f.cause = clip(msg)
		}
		return !was
	}
	if reDeath.MatchString(msg) {
		f.failed = true
		if f.death == "" {
			f.death = clip(msg)
		}
		return !was
	}
	for _, marker := range fatalMarks {
		if strings.Contains(msg, marker) {
			f.failed = true
			if f.fatal == "" {
				f.fatal = clip(msg)
			}
			return !was
		}
	}
	if (in.level == "ERROR" || in.level == "CRITICAL") && f.errorLevel == "" && strings.TrimSpace(msg) != "" {
		f.errorLevel = clip(msg)
	}
	return false
}

func (f *failure) exception(msg, proc string) {
	if reValidation.MatchString(msg) {
		setState(f.validation, proc, true)
		f.field = ""
	}
	switch {
	case isWrapper(msg):
		if f.wrapper == "" {
			f.wrapper = clip(msg)
		}
	case f.root == "":
		f.root = clip(msg)
	}
}

// reason is the line to show for a failed start.
func (f *failure) reason() string {
	return firstNonEmpty(f.root, f.wrapper, f.cause, f.fatal, f.death, f.errorLevel)
}

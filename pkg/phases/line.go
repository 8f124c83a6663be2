package phases

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Clock names, best first. A log's clock is the best one any of its lines carries.
const (
	ClockCRI       = "cri"       // kubelet CRI log file: RFC3339Nano, full date, ns
	ClockKubectl   = "kubectl"   // kubectl logs --timestamps
	ClockCollector = "collector" // "YYYY-MM-DD HH:MM:SS.mmm | "
	ClockJournald  = "journald"  // journalctl -o short-iso / short-iso-precise
	ClockSyslog    = "syslog"    // "Mon DD HH:MM:SS host tag[pid]: " (no year)
	ClockVLLM      = "vllm"      // vLLM's own "MM-DD HH:MM:SS" (no year, 1 s)
	ClockNone      = "none"
)

var (
	reJournald  = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) \S+ [^\s:\[]+(?:\[\d+\])?: (.*)$`)
	reKubectl   = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) (.*)$`)
	reCollector = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?) \| (.*)$`)
	// CI runners and log shippers that bracket an RFC 3339 time ("[2025-10-16T06:08:44Z] …", Buildkite).
	reBracketISO = regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\] (.*)$`)
	reSyslog     = regexp.MustCompile(`^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?) \S+ [^\s:\[]+(?:\[\d+\])?: (.*)$`)
	// Source prefixes put in front by tools that merge several containers: `kubectl logs --prefix`
	// ("[pod/<pod>/<container>] ") and `docker compose logs` ("<service>  | ").
	reKubePrefix    = regexp.MustCompile(`^\[(pod/[^\]\s]{1,300})\] (.*)$`)
	reComposePrefix = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9_.-]{0,127}) +\| (.*)$`)
	reANSI          = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)
	// One process prefix: vLLM's "(<Name> pid=<n>) "; Ray adds ", ip=<addr>" for a worker on another
	// node and may nest its own prefix outside vLLM's ("(RayWorkerProc pid=1, ip=10.0.0.2) (Worker_DP1_TP0 pid=1) ").
	reProc = regexp.MustCompile(`^\(([^()]{1,64}?) pid=(\d+)(?:, ip=([^()\s,]{1,64}))?\) ?`)
	// Ray's log deduplication appends this to a line other ranks printed too.
	reRayRepeated = regexp.MustCompile(`\s*\[repeated \d+x across cluster\]\s*$`)
	// The data-parallel rank in a process name: EngineCore_DP1, Worker_DP1_TP0_EP2, EngineCore_1 (v0.8–v0.10).
	reDPName = regexp.MustCompile(`(?:^|_)DP(\d+)(?:_|$)|^EngineCore_(\d+)$`)
	// §8 of the reference: level, MM-DD HH:MM:SS, [file:line] (no "[" up to v0.7.3), after an optional
	// VLLM_LOGGING_PREFIX (found by headerStart, so this pattern can stay anchored and cheap).
	reHeader  = regexp.MustCompile(`^(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,]\d+)? \[?([^\]\s]+):(\d+)\] ?`)
	reUvicorn = regexp.MustCompile(`^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(.*)$`)
)

// outer is what a line's wrapper (CRI, kubectl, journald, collector, syslog) says.
type outer struct {
	t      time.Time
	clock  string
	stream string // CRI stdout|stderr
	tag    string // CRI P|F
	text   string
	noYear bool // syslog: year to infer
	// source names the container a merging tool said the line came from (kubectl --prefix, docker
	// compose); "" for a single container's log.
	source string
}

// unwrap removes a source prefix and one outer wrapper if present.
func unwrap(s string) outer {
	if strings.HasPrefix(s, "[pod/") {
		if m := reKubePrefix.FindStringSubmatch(s); m != nil {
			o := unwrapClock(m[2])
			o.source = m[1]
			return o
		}
	}
	o := unwrapClock(s)
	if i := strings.Index(o.text, " | "); o.clock == "" && i > 0 && i < 160 {
		if m := reComposePrefix.FindStringSubmatch(o.text); m != nil {
			o = unwrapClock(m[2])
			o.source = m[1]
		}
	}
	return o
}

// unwrapClock removes one timestamped wrapper if present.
func unwrapClock(s string) outer {
	if o, ok := unwrapCRI(s); ok {
		return o
	}
	if m := reJournald.FindStringSubmatch(s); m != nil {
		if t, ok := parseISO(m[1]); ok {
			return outer{t: t, clock: ClockJournald, text: m[2]}
		}
	}
	if m := reKubectl.FindStringSubmatch(s); m != nil {
		if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			return outer{t: t, clock: ClockKubectl, text: m[2]}
		}
	}
	if m := reCollector.FindStringSubmatch(s); m != nil {
		if t, err := time.Parse("2006-01-02 15:04:05.999999999", strings.Replace(m[1], ",", ".", 1)); err == nil {
			return outer{t: t, clock: ClockCollector, text: m[2]}
		}
	}
	if len(s) > 2 && s[0] == '[' && s[1] >= '0' && s[1] <= '9' {
		m := reBracketISO.FindStringSubmatch(s)
		if m == nil {
			return outer{text: s}
		}
		if t, ok := parseISO(m[1]); ok {
			return outer{t: t, clock: ClockCollector, text: m[2]}
		}
	}
	if m := reSyslog.FindStringSubmatch(s); m != nil {
		if t, err := time.Parse("Jan _2 15:04:05.999999999", m[1]); err == nil {
			return outer{t: t, clock: ClockSyslog, text: m[2], noYear: true}
		}
	}
	return outer{text: s}
}

// unwrapCRI reads `<RFC3339Nano> <stdout|stderr> <P|F> <text>` without a regexp: it is the hot path.
func unwrapCRI(s string) (outer, bool) {
	sp := strings.IndexByte(s, ' ')
	if sp < 20 || sp > 40 || len(s) < sp+9 {
		return outer{}, false
	}
	rest := s[sp+1:]
	var stream string
	switch {
	case strings.HasPrefix(rest, "stdout "):
		stream = "stdout"
	case strings.HasPrefix(rest, "stderr "):
		stream = "stderr"
	default:
		return outer{}, false
	}
	rest = rest[7:]
	if len(rest) < 1 || (rest[0] != 'P' && rest[0] != 'F') || (len(rest) > 1 && rest[1] != ' ') {
		return outer{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s[:sp])
	if err != nil {
		return outer{}, false
	}
	text := ""
	if len(rest) > 2 {
		text = rest[2:]
	}
	return outer{t: t, clock: ClockCRI, stream: stream, tag: rest[:1], text: text}, true
}

func parseISO(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999-0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// inner is one segment of a line after the wrapper: process prefix and vLLM header taken apart.
type inner struct {
	proc  string // "EngineCore_DP0 pid=7" (the rank key); "" for the main process
	host  string // the node Ray said the process runs on (ip=…); "" for the local node
	dp    string // the data-parallel rank from the process name; "" for rank 0 and non-DP processes
	level string // vLLM or uvicorn level; "" for bare text
	file  string // vLLM [file:line]; "" otherwise
	msg   string
	// repeated: Ray printed this once for several ranks, late (its dedup window), with the first one's time.
	repeated bool
	// vLLM header clock (no year)
	hasHdr              bool
	mon, day, h, mi, se int
}

// maxProcPrefixes bounds how many nested process prefixes are taken off one line.
const maxProcPrefixes = 4

// split strips ANSI colour and the `(<Name> pid=<n>) ` prefixes, then reads the vLLM or uvicorn header.
func split(seg string) inner {
	seg = reANSI.ReplaceAllString(seg, "")
	var in inner
	for range maxProcPrefixes {
		m := reProc.FindStringSubmatch(seg)
		if m == nil {
			break
		}
		in.proc = m[1] + " pid=" + m[2] // the innermost prefix names the rank
		if m[3] != "" {
			in.host = m[3]
		}
		seg = seg[len(m[0]):]
	}
	if in.proc != "" {
		if m := reDPName.FindStringSubmatch(in.proc[:strings.LastIndex(in.proc, " pid=")]); m != nil {
			in.dp = m[1] + m[2]
			if in.dp == "0" {
				in.dp = ""
			}
		}
	}
	if strings.Contains(seg, "across cluster]") {
		if loc := reRayRepeated.FindStringIndex(seg); loc != nil {
			seg, in.repeated = seg[:loc[0]], true
		}
	}
	if i := headerStart(seg); i >= 0 {
		if m := reHeader.FindStringSubmatch(seg[i:]); m != nil {
			in.level, in.file, in.msg, in.hasHdr = m[1], m[7], seg[i+len(m[0]):], true
			in.mon, _ = strconv.Atoi(m[2])
			in.day, _ = strconv.Atoi(m[3])
			in.h, _ = strconv.Atoi(m[4])
			in.mi, _ = strconv.Atoi(m[5])
			in.se, _ = strconv.Atoi(m[6])
			if in.mon < 1 || in.mon > 12 || in.day < 1 || in.day > 31 || in.h > 23 || in.mi > 59 || in.se > 60 {
				in.hasHdr = false
			}
			return in
		}
	}
	if m := reUvicorn.FindStringSubmatch(seg); m != nil {
		in.level, in.msg = m[1], m[2]
		return in
	}
	in.msg = seg
	return in
}

// maxLoggingPrefix bounds how far into a line the level may start (VLLM_LOGGING_PREFIX).
const maxLoggingPrefix = 40

var levels = []string{"INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL "}

// headerStart returns where a vLLM level word starts within the first maxLoggingPrefix bytes, or -1.
func headerStart(s string) int {
	head := s[:min(len(s), maxLoggingPrefix+len("CRITICAL "))]
	best := -1
	for _, l := range levels {
		if i := strings.Index(head, l); i >= 0 && i <= maxLoggingPrefix && (best < 0 || i < best) {
			best = i
		}
	}
	return best
}

// yearClock turns year-less times (vLLM's MM-DD HH:MM:SS, syslog) into absolute ones: the first one
// takes the reference's year (the year before if that would be in the reference's future), and the
// year advances when the month goes backwards (a start that runs over New Year).
type yearClock struct {
	ref     time.Time
	year    int
	lastMon int
}

func (y *yearClock) at(mon, day, h, mi, s, ns int) time.Time {
	if y.year == 0 {
		y.year = y.ref.Year()
		if y.ref.IsZero() {
			y.year = 2000 // arbitrary but fixed: only StartedAt would show it, and it is left zero then
		} else if time.Date(y.year, time.Month(mon), day, h, mi, s, ns, time.UTC).After(y.ref.Add(24 * time.Hour)) {
			y.year--
		}
	} else if mon < y.lastMon && y.lastMon-mon > 6 {
		y.year++
	}
	y.lastMon = mon
	return time.Date(y.year, time.Month(mon), day, h, mi, s, ns, time.UTC)
}

package phases

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
)

// Options tune a parse. All are optional.
type Options struct {
	// Source names the input in the Result (a file name, a pod/container).
	Source string
	// Reference is when the log was read or last written; it supplies the year vLLM's own clock lacks.
	// Zero leaves Result.StartedAt zero for year-less logs (durations are unaffected).
	Reference time.Time
	// Start is the container's start time when the caller knows it (containerd). It replaces the first
	// log line as the process start, which makes imports include the interpreter's start.
	Start time.Time
	// PullStart and PullEnd bound the image pull the kubelet reported for this container (its Pulled
	// event); when both are set the result gets an image_pull phase and the waterfall starts there.
	PullStart, PullEnd time.Time
}

// maxLine bounds one logical line (a CRI partial run included) so a hostile log cannot grow memory.
const maxLine = 1 << 20

// Parser reads a log line by line; Result can be taken at any point (the follower does, to see a start
// finish). It never panics on any input (FuzzParse). The zero value is not usable; use NewParser.
type Parser struct {
	opts     Options
	partial  map[string]*strings.Builder // CRI P fragments per stream
	partialT map[string]time.Time
	yc       yearClock
	clock    string // best clock seen
	cl       clocks
	vllm     bool // a vLLM marker was seen
	lines    int
	ev       events
}

// NewParser returns a parser for one container start.
func NewParser(opts Options) *Parser {
	return &Parser{
		opts: opts, partial: map[string]*strings.Builder{}, partialT: map[string]time.Time{},
		yc: yearClock{ref: opts.Reference}, clock: ClockNone, cl: newClocks(), ev: newEvents(),
	}
}

// Parse reads a whole log.
func Parse(r io.Reader, opts Options) (Result, error) {
	p := NewParser(opts)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if len(line) > 0 || err == nil {
			p.Line(line)
		}
		if err == io.EOF {
			return p.Result(), nil
		}
		if err != nil {
			return p.Result(), fmt.Errorf("read %s: %w", opts.Source, err)
		}
	}
}

// readLine returns one line without its newline, truncated to maxLine.
func readLine(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		chunk, isPrefix, err := br.ReadLine()
		if sb.Len() < maxLine {
			sb.Write(chunk[:min(len(chunk), maxLine-sb.Len())])
		}
		if err != nil || !isPrefix {
			return sb.String(), err
		}
	}
}

// SetContainer supplies what the node knows beyond the log (container start, image pull), once the
// caller has looked it up; zero values leave the log's own clock in charge.
func (p *Parser) SetContainer(start, pullStart, pullEnd time.Time) {
	p.opts.Start, p.opts.PullStart, p.opts.PullEnd = start, pullStart, pullEnd
}

// IsVLLM reports whether the log so far looks like vLLM's (a banner, engine or vLLM-only line).
func (p *Parser) IsVLLM() bool { return p.vllm }

// Lines returns how many lines were fed (to give up on containers that are not vLLM).
func (p *Parser) Lines() int { return p.lines }

// Line feeds one line, without its trailing newline.
func (p *Parser) Line(raw string) {
	p.lines++
	raw = strings.TrimRight(raw, "\n")
	o := unwrap(raw)
	if o.clock == ClockCRI {
		if o.tag == "P" {
			b := p.partial[o.stream]
			if b == nil {
				b = &strings.Builder{}
				p.partial[o.stream] = b
				p.partialT[o.stream] = o.t
			}
			if b.Len() < maxLine {
				b.WriteString(o.text[:min(len(o.text), maxLine-b.Len())])
			}
			return
		}
		if b := p.partial[o.stream]; b != nil {
			b.WriteString(o.text[:min(len(o.text), max(0, maxLine-b.Len()))])
			o.text, o.t = b.String(), p.partialT[o.stream]
			delete(p.partial, o.stream)
			delete(p.partialT, o.stream)
		}
	}
	if o.noYear {
		o.t = p.yc.at(int(o.t.Month()), o.t.Day(), o.t.Hour(), o.t.Minute(), o.t.Second(), o.t.Nanosecond())
	}
	// tqdm redraws with \r; NewLineFormatter ends continuation lines with \r.
	for _, seg := range strings.Split(o.text, "\r") {
		if strings.TrimSpace(seg) != "" {
			p.segment(o, seg)
		}
	}
}

func (p *Parser) segment(o outer, seg string) {
	in := split(seg)
	var t time.Time
	own := false
	switch {
	case o.clock != ClockNone && o.clock != "":
		if p.clock == ClockNone || p.clock == ClockVLLM {
			p.clock = o.clock
		}
		if p.clock == o.clock {
			t, own = o.t, true
		}
	case in.hasHdr && (p.clock == ClockNone || p.clock == ClockVLLM):
		p.clock = ClockVLLM
		t, own = p.yc.at(in.mon, in.day, in.h, in.mi, in.se, 0), true
	}
	outerClock := p.clock != ClockNone && p.clock != ClockVLLM
	dom := p.cl.bound(domainKey(outerClock, o, in))
	proc := o.source + "|" + in.host + "|" + in.proc
	ok := own
	if own {
		p.cl.own(proc, dom, t, in.repeated)
	} else {
		// Nothing on this line places it on the clock: its own process's last time does (never
		// another rank's); facts (version, errors) are learnt either way.
		t, ok = p.cl.at(proc, dom, in.proc != "")
	}
	p.ev.observe(p, in, proc, dom, t, ok)
}

// Result returns what the log says so far.
func (p *Parser) Result() Result {
	r := p.ev.result(p.opts, p.cl.included())
	r.Clock = p.clock
	if r.Source == "" {
		r.Source = p.opts.Source
	}
	if p.clock == ClockNone || ((p.clock == ClockVLLM || p.clock == ClockSyslog) && p.opts.Reference.IsZero()) {
		r.StartedAt = time.Time{}
	}
	return r
}

package cli

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// Progress modes (--progress of the prefetch commands).
const (
	ProgressAuto  = "auto"
	ProgressBars  = "bars"
	ProgressPlain = "plain"
	ProgressNone  = "none"
)

// CheckProgress validates a --progress value.
func CheckProgress(mode string) error {
	switch mode {
	case ProgressAuto, ProgressBars, ProgressPlain, ProgressNone:
		return nil
	}
	return &ExitError{Code: 2, Err: fmt.Errorf("--progress %q: use auto, bars, plain or none", mode)}
}

// Progress is the one progress renderer of the CLI: byte progress of several items (layers, models)
// on ErrOut, as one live bar per item (mpb) in bars mode, as the lines the caller prints in plain mode,
// or nothing in none mode. auto is bars on a terminal, plain otherwise. Its methods are safe for
// concurrent use.
type Progress struct {
	mode  string
	out   io.Writer
	p     *mpb.Progress
	mu    sync.Mutex // guards bars; held while calling into mpb
	bars  map[string]*mpb.Bar
	infoM sync.Mutex // guards info apart from mu: mpb's render goroutine reads it through decorators
	info  map[string]BarUpdate
}

// NewProgress starts a renderer in mode (bars of width cells) on s.ErrOut until Finish.
func NewProgress(ctx context.Context, s IOStreams, mode string, width int) *Progress {
	if mode == ProgressAuto {
		mode = ProgressPlain
		if IsTerminal(s.ErrOut) {
			mode = ProgressBars
		}
	}
	pr := &Progress{mode: mode, out: s.ErrOut, bars: map[string]*mpb.Bar{}, info: map[string]BarUpdate{}}
	if mode == ProgressBars {
		pr.p = mpb.NewWithContext(ctx, mpb.WithOutput(s.ErrOut), mpb.WithWidth(width),
			mpb.WithRefreshRate(200*time.Millisecond), mpb.WithAutoRefresh())
	}
	return pr
}

// Mode is the resolved mode: bars, plain or none.
func (p *Progress) Mode() string { return p.mode }

// BarUpdate is an item's progress.
type BarUpdate struct {
	// Label names the item; it is fixed by the first update.
	Label string
	// Done and Total are bytes; Total <= 0 while unknown.
	Done, Total int64
	// Final ends the bar (the item is complete, or failed).
	Final bool
	// Status is shown after the label (a state), Extra after the byte counters (a rate and ETA);
	// Percent shows the percentage there instead. Status and Extra may change with every update.
	Status, Extra string
	Percent       bool
}

// Bar updates item key's bar (bars mode only; a no-op otherwise).
func (p *Progress) Bar(key string, u BarUpdate) {
	if p.mode != ProgressBars {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.infoM.Lock()
	p.info[key] = u
	p.infoM.Unlock()
	b, ok := p.bars[key]
	if !ok {
		pre := []decor.Decorator{decor.Name(u.Label, decor.WCSyncSpaceR)}
		if u.Status != "" {
			pre = append(pre, decor.Any(func(decor.Statistics) string { return p.get(key).Status }, decor.WCSyncSpaceR))
		}
		extra := decor.Any(func(decor.Statistics) string { return p.get(key).Extra }, decor.WCSyncSpace)
		if u.Percent {
			extra = decor.Percentage(decor.WCSyncSpace)
		}
		b = p.p.AddBar(max(u.Total, 1), mpb.PrependDecorators(pre...),
			mpb.AppendDecorators(decor.CountersKibiByte("% .1f / % .1f", decor.WCSyncSpace), extra))
		p.bars[key] = b
	}
	if u.Total > 0 {
		b.SetTotal(u.Total, false)
	}
	b.SetCurrent(u.Done)
	if u.Final {
		b.SetTotal(-1, true)
	}
}

// HasBar reports whether item key has a bar.
func (p *Progress) HasBar(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.bars[key]
	return ok
}

func (p *Progress) get(key string) BarUpdate {
	p.infoM.Lock()
	defer p.infoM.Unlock()
	return p.info[key]
}

// Printf prints a line in plain mode (a no-op otherwise).
func (p *Progress) Printf(format string, args ...any) {
	if p.mode == ProgressPlain {
		fmt.Fprintf(p.out, format, args...)
	}
}

// Finish ends every bar (aborting those a failure left short, so drawing stops) and waits for the
// last frame.
func (p *Progress) Finish() {
	if p.p == nil {
		return
	}
	p.mu.Lock()
	for _, b := range p.bars {
		if !b.Completed() {
			b.Abort(false)
		}
	}
	p.mu.Unlock()
	p.p.Wait()
}

package follow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/phases"
)

// recordsFile is the on-disk form of the kept records.
type recordsFile struct {
	Version int             `json:"version"`
	Records []phases.Record `json:"records"` // oldest first
}

func (f *Follower) recordsPath() string { return filepath.Join(f.opts.StateDir, recordsFileName) }

// recordsFileName is the records file in the state dir; maxRecordsFile bounds reading it back (the
// kept records are a few KiB each).
const (
	recordsFileName = "phases.json"
	maxRecordsFile  = 64 << 20
)

// stateRoot opens the dir of path (warmd's own state dir, created if missing) as an fsroot Root, so
// the records file is read and replaced without following a link, and returns path's name in it.
func stateRoot(path string) (*fsroot.Root, fsroot.Path, error) {
	name, err := fsroot.ParsePath(filepath.Base(path))
	if err != nil {
		return nil, fsroot.Path{}, err
	}
	r, err := fsroot.Open(filepath.Dir(path))
	if err != nil {
		return nil, fsroot.Path{}, fmt.Errorf("open state dir: %w", err)
	}
	return r, name, nil
}

func loadRecords(path string) ([]phases.Record, error) {
	r, name, err := stateRoot(path)
	if err != nil {
		return nil, fmt.Errorf("read phases records %s: %w", path, err)
	}
	defer r.Close()
	b, err := r.ReadFile(name, maxRecordsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read phases records: %w", err)
	}
	var rf recordsFile
	if err := json.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("decode phases records %s: %w (the file is rewritten on the next start seen)", path, err)
	}
	return rf.Records, nil
}

// sweepRecordTemps removes the temps a crash left beside the records file (only its own: the state
// dir is shared). The follower calls it at its start, before it writes any record.
func sweepRecordTemps(path string) (int, error) {
	r, name, err := stateRoot(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return r.RemoveTempsOf(name)
}

// saveRecords writes the records with fsroot's atomic writer (temp file, fsync, rename, fsync the
// dir): a crash leaves either the old file or the new one, never a torn one.
func saveRecords(path string, recs []phases.Record) error {
	b, err := json.MarshalIndent(recordsFile{Version: 1, Records: recs}, "", " ")
	if err != nil {
		return fmt.Errorf("encode phases records: %w", err)
	}
	r, name, err := stateRoot(path)
	if err != nil {
		return fmt.Errorf("write phases records %s: %w", path, err)
	}
	defer r.Close()
	if err := r.WriteFile(name, b, 0o644); err != nil {
		return fmt.Errorf("write phases records: %w", err)
	}
	return nil
}

// record keeps one finished start, persists the list and observes the metrics.
func (f *Follower) record(s *stream, r phases.Result) {
	s.done = true
	s.close()
	sku := ""
	if f.opts.SKU != nil {
		sku = f.opts.SKU()
	}
	var image string
	if f.opts.Container != nil {
		ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
		ci, err := f.opts.Container(ctx, ContainerRef{Namespace: s.pod.namespace, Pod: s.pod.name, PodUID: s.pod.uid, Container: s.pod.container, Restart: s.restart})
		cancel()
		if err != nil {
			f.log.Debug("container lookup", "pod", s.pod.namespace+"/"+s.pod.name, "err", err)
		}
		image = ci.Image
		s.parser.SetContainer(ci.Started, ci.PullStart, ci.PullEnd)
		r = s.parser.Result()
	}
	model := r.Model
	if f.opts.Model != nil {
		model = f.opts.Model(s.pod.namespace, s.pod.name, r)
	}
	rec := phases.Record{
		Namespace: s.pod.namespace, Pod: s.pod.name, PodUID: s.pod.uid, Container: s.pod.container, Restart: s.restart,
		Model: model, Image: image, GPUSKU: sku, Log: s.path, Recorded: f.opts.Now().UTC(), Result: r,
	}
	f.mu.Lock()
	f.records = append(f.records, rec)
	if over := len(f.records) - f.opts.Keep; over > 0 {
		for _, old := range f.records[:over] {
			delete(f.keys, old.Key())
		}
		f.records = slices.Clone(f.records[over:])
	}
	f.keys[rec.Key()] = true
	recs := slices.Clone(f.records)
	f.mu.Unlock()
	if err := saveRecords(f.recordsPath(), recs); err != nil {
		f.problem = err.Error()
		f.log.Warn("keep phases records", "err", err)
	} else if f.problem != "" && !isDirProblem(f.problem) {
		f.problem = ""
	}
	f.observe(rec)
	total := "unknown" // a start cut short before its first timed line has no total
	if r.TotalSeconds != nil {
		total = strconv.FormatFloat(*r.TotalSeconds, 'f', 1, 64)
	}
	f.log.Info("vLLM start recorded", "pod", s.pod.namespace+"/"+s.pod.name, "container", s.pod.container,
		"restart", s.restart, "outcome", r.Outcome, "compileCache", r.CompileCache, "totalSeconds", total)
}

func isDirProblem(p string) bool { return len(p) > 16 && p[:16] == "read pod log dir" }

// observe exports one start. Phase histograms take only ready starts: a failed start's phases are cut
// short and would drag the distributions that predictions read.
func (f *Follower) observe(rec phases.Record) {
	m := f.opts.Metrics
	if m == nil {
		return
	}
	r := rec.Result
	m.Starts.WithLabelValues(string(r.Outcome), string(r.CompileCache)).Inc()
	if r.Outcome != phases.OutcomeReady {
		return
	}
	model := rec.Model
	if model == "" {
		model = "unknown"
	}
	for _, p := range r.Phases {
		m.PhaseSeconds.WithLabelValues(p.Name, model, rec.GPUSKU, string(r.CompileCache)).Observe(p.Seconds)
	}
	if r.TotalSeconds != nil {
		m.PhaseSeconds.WithLabelValues(phases.PhaseTotal, model, rec.GPUSKU, string(r.CompileCache)).Observe(*r.TotalSeconds)
	}
}

// publish replaces the phases status section when it changed: log writes arrive many times a second,
// and every Publish wakes every reader of the store.
func (f *Follower) publish() {
	if f.opts.Store == nil {
		return
	}
	st := phases.Status{PodLogDir: f.opts.Dir}
	for _, s := range f.streams {
		if !s.done && s.parser.IsVLLM() {
			st.Following++
		}
	}
	f.mu.Lock()
	sig := fmt.Sprintf("%d/%d/%s", len(f.records), st.Following, f.problem)
	if len(f.records) > 0 {
		sig += "/" + f.records[len(f.records)-1].Key()
	}
	f.mu.Unlock()
	if sig == f.published {
		return
	}
	f.published = sig
	recs := f.Records()
	slices.Reverse(recs)
	st.Records = recs
	if f.problem != "" {
		st.Problems = []string{f.problem}
	}
	phases.Section.Publish(f.opts.Store, st)
}

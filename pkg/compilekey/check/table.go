package check

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"time"

	"warmd.io/warmd/pkg/compilekey"
	"warmd.io/warmd/pkg/fsroot"
)

// tableFile keeps the inputs of recorded starts across warmd restarts (a record read back from disk
// no longer has its pod, and its log's args line is not part of the record).
const (
	tableFile    = "compilekey.json"
	maxTableFile = 16 << 20
	maxEntries   = 256
)

// table holds the inputs of recorded starts by phases.Record.Key.
type table struct {
	Version int              `json:"version"`
	Starts  map[string]entry `json:"starts"`
}

// entry is one recorded start: its inputs when they could be read (nil otherwise) and whether it
// left graphs in the node's compile cache (a hit or a miss with a cache dir).
type entry struct {
	Recorded time.Time          `json:"recorded"`
	Graphs   bool               `json:"graphs"`
	Inputs   *compilekey.Inputs `json:"inputs,omitempty"`
}

// put adds an entry, dropping the oldest beyond maxEntries.
func (t *table) put(key string, e entry) {
	if t.Starts == nil {
		t.Starts = map[string]entry{}
	}
	t.Starts[key] = e
	for len(t.Starts) > maxEntries {
		oldest := ""
		for k, v := range t.Starts {
			if oldest == "" || v.Recorded.Before(t.Starts[oldest].Recorded) {
				oldest = k
			}
		}
		delete(t.Starts, oldest)
	}
}

// cached returns the inputs of the starts that left graphs, oldest first, and their count.
func (t *table) cached() ([]compilekey.Inputs, int) {
	keys := make([]string, 0, len(t.Starts))
	for k, e := range t.Starts {
		if e.Graphs && e.Inputs != nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return t.Starts[a].Recorded.Compare(t.Starts[b].Recorded) })
	out := make([]compilekey.Inputs, 0, len(keys))
	for _, k := range keys {
		out = append(out, *t.Starts[k].Inputs)
	}
	return out, len(out)
}

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

func loadTable(path string) (table, error) {
	t := table{Version: 1, Starts: map[string]entry{}}
	r, name, err := stateRoot(path)
	if err != nil {
		return t, fmt.Errorf("read compile-cache inputs %s: %w", path, err)
	}
	defer r.Close()
	b, err := r.ReadFile(name, maxTableFile)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("read compile-cache inputs: %w", err)
	}
	var got table
	if err := json.Unmarshal(b, &got); err != nil {
		return t, fmt.Errorf("decode compile-cache inputs %s: %w (rewritten on the next start)", path, err)
	}
	if got.Starts != nil {
		t.Starts = got.Starts
	}
	return t, nil
}

// saveTable writes the table atomically (fsroot's writer: temp file, fsync, rename).
func saveTable(path string, t table) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode compile-cache inputs: %w", err)
	}
	r, name, err := stateRoot(path)
	if err != nil {
		return fmt.Errorf("write compile-cache inputs %s: %w", path, err)
	}
	defer r.Close()
	if err := r.WriteFile(name, b, 0o600); err != nil {
		return fmt.Errorf("write compile-cache inputs: %w", err)
	}
	return nil
}

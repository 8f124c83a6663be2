package follow

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"warmd.io/warmd/pkg/phases"
)

// RunningModels returns the models served by vLLM containers whose pods are on this node now: the
// kubelet keeps a pod's log dir (<dir>/<ns>_<pod>_<uid>/) exactly as long as the pod exists on the node,
// so a log dir whose newest container log is a vLLM start names a model a running pod uses. Weights and
// compile caches must never evict those. It reads at most maxLines of each newest log: the model is in
// vLLM's first lines.
func RunningModels(dir string, model ModelFunc, maxLines int) ([]string, error) {
	pods, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read pod log dir %s: %w", dir, err)
	}
	found := map[string]bool{}
	for _, pd := range pods {
		parts := strings.Split(pd.Name(), "_")
		if !pd.IsDir() || len(parts) != 3 {
			continue
		}
		containers, _ := os.ReadDir(filepath.Join(dir, pd.Name()))
		for _, c := range containers {
			if !c.IsDir() {
				continue
			}
			cdir := filepath.Join(dir, pd.Name(), c.Name())
			log := newestLog(cdir)
			if log == "" {
				continue
			}
			if r, ok := probe(log, maxLines); ok {
				name := r.Model
				if model != nil {
					name = model(parts[0], parts[1], r)
				}
				if name != "" {
					found[name] = true
				}
			}
		}
	}
	out := make([]string, 0, len(found))
	for m := range found {
		out = append(out, m)
	}
	slices.Sort(out)
	return out, nil
}

// newestLog is the container's current log (the highest N of N.log), "" when there is none.
func newestLog(dir string) string {
	files, _ := os.ReadDir(dir)
	best, path := -1, ""
	for _, f := range files {
		if m := logName.FindStringSubmatch(f.Name()); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > best {
				best, path = n, filepath.Join(dir, f.Name())
			}
		}
	}
	return path
}

// probe parses the first maxLines of a log; ok is true for a vLLM start that printed its model.
func probe(path string, maxLines int) (phases.Result, bool) {
	f, err := os.Open(path)
	if err != nil {
		return phases.Result{}, false
	}
	defer f.Close()
	p := phases.NewParser(phases.Options{Source: path})
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for i := 0; i < maxLines && sc.Scan(); i++ {
		p.Line(sc.Text())
	}
	r := p.Result()
	return r, p.IsVLLM() && r.Model != ""
}

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func runPhases(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	root.SetArgs(append([]string{"phases"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestPhasesCommand(t *testing.T) {
	cold, warm := "../phases/testdata/seed-7b-cold.log", "../phases/testdata/seed-7b-warm.log"
	out, err := runPhases(t, "", cold, warm)
	if err != nil || !strings.Contains(out, "seed-7b-cold.log") || !strings.Contains(out, "torch.compile") || !strings.Contains(out, "hit") {
		t.Fatalf("table: %v\n%s", err, out)
	}
	out, err = runPhases(t, "", "-o", "json", cold, warm)
	var many []map[string]any
	if err != nil || json.Unmarshal([]byte(out), &many) != nil || len(many) != 2 {
		t.Fatalf("json for two files must be an array of two: %v\n%s", err, out)
	}
	data, err := os.ReadFile(cold)
	if err != nil {
		t.Fatal(err)
	}
	out, err = runPhases(t, string(data), "-o", "json", "-")
	var one map[string]any
	if err != nil || json.Unmarshal([]byte(out), &one) != nil || one["source"] != "-" || one["compile_cache"] != "miss" {
		t.Fatalf("json from stdin must be one object: %v\n%s", err, out)
	}
	out, err = runPhases(t, "", "-o", "svg", cold)
	if err != nil || !strings.HasPrefix(out, "<?xml") || !strings.Contains(out, "</svg>") {
		t.Fatalf("svg: %v\n%.200s", err, out)
	}
	var ee *ExitError
	if _, err = runPhases(t, "", "-o", "yaml", cold); !errors.As(err, &ee) || ee.Code != 2 {
		t.Errorf("bad -o: %v, want exit 2", err)
	}
	if _, err = runPhases(t, "", "/nonexistent/vllm.log"); err == nil || !strings.Contains(err.Error(), "pass a vLLM log file") {
		t.Errorf("missing file: %v", err)
	}
}

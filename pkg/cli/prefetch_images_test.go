package cli

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPrefetchImages runs the one-shot command against an in-process registry with the embedded
// backend (no daemon needed): one image pulls, one missing image fails, and the exit code says so.
func TestPrefetchImages(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(16<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host+"/warmd-cli/img:v1", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFor := func(images ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n\ndataDir: %s\ncontainerd:\n  backend: embedded\nimages:\n", filepath.Join(dir, "data"))
		for _, im := range images {
			fmt.Fprintf(&b, "- ref: %s\n", im)
		}
		p := filepath.Join(dir, fmt.Sprintf("c%d.yaml", len(images)))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		images   []string
		wantCode int
		wantOut  []string
		wantErr  []string
	}{
		{"pulls with per-layer progress", []string{host + "/warmd-cli/img:v1"}, 0,
			[]string{"Backend: embedded", "ready", "true"}, []string{"layer 1/2", "layer 2/2", "done"}},
		{"a missing image fails with exit 1 and a reason", []string{host + "/warmd-cli/img:v1", host + "/warmd-cli/missing:v1"}, 1,
			[]string{"failed", "not found (check the image reference"}, []string{"some images are not warm"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			root.SetArgs([]string{"prefetch", "images", "--config", cfgFor(tc.images...), "--progress", "plain"})
			err := root.Execute()
			code := 0
			if err != nil {
				code = 1
				if ee, ok := err.(*ExitError); ok {
					code = ee.Code
				}
				errOut.WriteString(err.Error())
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out.String(), errOut.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut.String())
				}
			}
		})
	}
}

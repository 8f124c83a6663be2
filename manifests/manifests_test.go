// Package manifests_test checks the YAML under manifests/: every file is listed in its
// kustomization, decodes strictly into the API types, renders to the golden file (so any change is
// reviewed as a diff), wires the names the code expects, and is accepted by a real kube-apiserver.
// admission_test.go proves the ValidatingAdmissionPolicy on the same API server.
package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/golden"
)

// dirs are the kustomizations, in apply order.
var dirs = []string{".", "monitoring", "examples"}

// doc is one YAML document from a manifest file.
type doc struct {
	file string
	raw  []byte
	obj  *unstructured.Unstructured
}

// load reads every resource of the kustomization in dir, in its listed order.
func load(t *testing.T, dir string) []doc {
	t.Helper()
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	var out []doc
	for _, f := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s lists %s: %v", dir, f, err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(stripComments(raw))) == 0 {
				continue
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, doc{file: filepath.Join(dir, f), raw: raw, obj: u})
		}
	}
	return out
}

func all(t *testing.T) []doc {
	var out []doc
	for _, d := range dirs {
		out = append(out, load(t, d)...)
	}
	return out
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// TestEveryFileListed keeps stray YAML out of manifests/: a file no kustomization lists is never applied.
func TestEveryFileListed(t *testing.T) {
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			listed := map[string]bool{}
			for _, d := range load(t, dir) {
				listed[filepath.Base(d.file)] = true
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
			for _, f := range files {
				if b := filepath.Base(f); b != "kustomization.yaml" && !listed[b] {
					t.Errorf("%s is not listed in %s/kustomization.yaml", f, dir)
				}
			}
		})
	}
}

// TestStrictDecode decodes every document into its Go type with unknown and duplicate fields as
// errors, so a misspelt field fails here rather than being dropped by the API server.
func TestStrictDecode(t *testing.T) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	typo := []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n")
	if _, _, err := codecs.UniversalDeserializer().Decode(typo, nil, nil); err == nil || !strings.Contains(err.Error(), "clusterIp") {
		t.Fatalf("strict decoding let a misspelt field through: %v", err)
	}
	for _, d := range all(t) {
		t.Run(d.file+"/"+d.obj.GetKind()+"/"+d.obj.GetName(), func(t *testing.T) {
			if d.obj.GetAPIVersion() == "monitoring.coreos.com/v1" {
				return // not a built-in type; the API server test applies it against a CRD
			}
			obj, _, err := codecs.UniversalDeserializer().Decode(d.raw, nil, nil)
			if err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			if _, ok := obj.(runtime.Object); !ok {
				t.Fatalf("decoded %T", obj)
			}
		})
	}
}

// TestRenderedGolden renders all kustomizations the way `kubectl kustomize` would (without kubectl:
// resources in order, comments dropped, keys sorted) and compares with testdata/rendered.golden.yaml.
// Run `go test ./manifests -run TestRenderedGolden -update` after an intended change.
func TestRenderedGolden(t *testing.T) {
	var buf bytes.Buffer
	for i, d := range all(t) {
		if i > 0 {
			buf.WriteString("---\n")
		}
		fmtDoc := d.obj.DeepCopy()
		b, err := yaml.Marshal(fmtDoc.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("# Source: " + filepath.ToSlash(d.file) + "\n")
		buf.Write(b)
	}
	golden.Check(t, filepath.Join("testdata", "rendered.golden.yaml"), buf.Bytes())
}

// find returns the one document of kind/name.
func find(t *testing.T, docs []doc, kind, name string) *unstructured.Unstructured {
	t.Helper()
	i := slices.IndexFunc(docs, func(d doc) bool { return d.obj.GetKind() == kind && d.obj.GetName() == name })
	if i < 0 {
		t.Fatalf("no %s %s in the manifests", kind, name)
	}
	return docs[i].obj
}

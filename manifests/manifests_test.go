// Package manifests_test checks the YAML under manifests/: every file is listed in its
// kustomization, decodes strictly into the API types, renders to the golden file (so any change is
// reviewed as a diff), wires the names the code expects, and is accepted by a real kube-apiserver.
// admission_test.go proves the ValidatingAdmissionPolicy on the same API server.
package manifests_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"warmd.io/warmd/internal/golden"
	"warmd.io/warmd/internal/manifesttest"
)

// dirs are the kustomizations, in apply order.
var dirs = []string{".", "monitoring", "examples"}

// doc is one YAML document from a manifest file.
type doc = manifesttest.Doc

func all(t *testing.T) []doc {
	var out []doc
	for _, d := range dirs {
		out = append(out, manifesttest.Load(t, d)...)
	}
	return out
}

// TestEveryFileListed keeps stray YAML out of manifests/: a file no kustomization lists is never applied.
func TestEveryFileListed(t *testing.T) {
	for _, dir := range append(slices.Clone(dirs), "examples/monitoring") {
		t.Run(dir, func(t *testing.T) {
			for _, f := range manifesttest.Unlisted(t, dir) {
				t.Errorf("%s is not listed in %s/kustomization.yaml", f, dir)
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
		t.Run(d.File+"/"+d.Obj.GetKind()+"/"+d.Obj.GetName(), func(t *testing.T) {
			if d.Obj.GetAPIVersion() == "monitoring.coreos.com/v1" {
				return // not a built-in type; the API server test applies it against a CRD
			}
			obj, _, err := codecs.UniversalDeserializer().Decode(d.Raw, nil, nil)
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
		fmtDoc := d.Obj.DeepCopy()
		b, err := yaml.Marshal(fmtDoc.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("# Source: " + filepath.ToSlash(d.File) + "\n")
		buf.Write(b)
	}
	golden.Check(t, filepath.Join("testdata", "rendered.golden.yaml"), buf.Bytes())
}

// find returns the one document of kind/name.
func find(t *testing.T, docs []doc, kind, name string) *unstructured.Unstructured {
	t.Helper()
	i := slices.IndexFunc(docs, func(d doc) bool { return d.Obj.GetKind() == kind && d.Obj.GetName() == name })
	if i < 0 {
		t.Fatalf("no %s %s in the manifests", kind, name)
	}
	return docs[i].Obj
}

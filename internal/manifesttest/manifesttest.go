// Package manifesttest loads Kubernetes YAML for the manifest tests (manifests/, manifests/extender/,
// the Helm chart's rendered output): kustomization listings, multi-document files, strict decoding
// into Go types. One loader, so every manifest test skips and names documents the same way.
package manifesttest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Doc is one YAML document: the file (or source) it came from, its raw YAML (for strict decoding
// into a Go type), and the object it holds.
type Doc struct {
	File string
	Raw  []byte
	Obj  *unstructured.Unstructured
}

// Kustomization is the part of a kustomization.yaml the tests read.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// ReadKustomization decodes dir/kustomization.yaml strictly.
func ReadKustomization(t testing.TB, dir string) Kustomization {
	t.Helper()
	var k Kustomization
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// Load reads every resource the kustomization in dir lists, in its listed order.
func Load(t testing.TB, dir string) []Doc {
	t.Helper()
	var out []Doc
	for _, f := range ReadKustomization(t, dir).Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("%s lists %s: %v", dir, f, err)
		}
		out = append(out, Parse(t, filepath.Join(dir, f), data)...)
	}
	return out
}

// Build runs the real kustomize (sigs.k8s.io/kustomize/api's krusty, what `kustomize build` and
// `kubectl kustomize` run) on the kustomization in dir and returns its objects in its output order,
// each named "kustomize build <dir>" in failures.
func Build(t testing.TB, dir string) []Doc {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return Parse(t, "kustomize build "+dir, out)
}

// Parse splits data (from src, named in failures) into its documents; empty ones (only comments,
// or {}) are skipped.
func Parse(t testing.TB, src string, data []byte) []Doc {
	t.Helper()
	var out []Doc
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v\n%s", src, err, raw)
		}
		out = append(out, Doc{File: src, Raw: raw, Obj: u})
	}
}

// Find returns the document of kind and name, strictly decoded into T (unknown fields fail).
func Find[T any](t testing.TB, docs []Doc, kind, name string) *T {
	t.Helper()
	for _, d := range docs {
		if d.Obj.GetKind() == kind && d.Obj.GetName() == name {
			var v T
			if err := yaml.UnmarshalStrict(d.Raw, &v); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return &v
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// Unlisted returns the *.yaml files in dir that its kustomization does not list: they are never
// applied, so a test fails on them.
func Unlisted(t testing.TB, dir string) []string {
	t.Helper()
	k := ReadKustomization(t, dir)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			out = append(out, f)
		}
	}
	return out
}

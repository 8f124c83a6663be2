package embedded_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/embedded"
	"warmd.io/warmd/pkg/prefetch/images/internal/imagetest"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

func pull(t *testing.T, s *embedded.Store, ref string) (prefetch.Resolved, prefetch.Progress) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := s.Resolve(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var last prefetch.Progress
	if err := s.Pull(ctx, r, func(p prefetch.Progress) { last = p }); err != nil {
		t.Fatal(err)
	}
	return r, last
}

func has(t *testing.T, s *embedded.Store, d string) bool {
	_, err := s.Content().Info(t.Context(), digest.Digest(d))
	return err == nil
}

// TestEmbedded covers what only the embedded store has to do itself; pulls by tag and digest,
// platform selection and release policies are in TestConformance.
func TestEmbedded(t *testing.T) {
	priv := imagetest.NewRegistry(t, imagetest.Options{User: "u", Pass: "p"})
	authFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(authFile, []byte(imagetest.DockerConfig(priv.Host, "u", "p")), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.New(embedded.Options{Dir: t.TempDir(), Registry: oci.Registry{Auth: oci.Auth{Files: []string{authFile}}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) (ref string, want, absent []string)
	}{
		{"private registry via a docker config.json", func(t *testing.T) (string, []string, []string) {
			img := priv.PushRandom(t, "warmd-emb/private:v1", 32<<10, 2)
			return priv.Ref("warmd-emb/private:v1"), imagetest.LayerDigests(t, img), nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, want, absent := tc.setup(t)
			r, last := pull(t, s, ref)
			for _, d := range want {
				if !has(t, s, d) {
					t.Errorf("layer %s missing after pull", d)
				}
			}
			for _, d := range absent {
				if has(t, s, d) {
					t.Errorf("layer %s of another platform was fetched", d)
				}
			}
			if n := len(last.Layers); n != len(want) {
				t.Errorf("progress saw %d layers, want %d", n, len(want))
			}
			l, err := s.Lookup(t.Context(), r.Name)
			if err != nil || !l.Pinned || !l.Managed || !l.Unpacked || l.Digest != r.Target.Digest {
				t.Fatalf("lookup: %+v, %v", l, err)
			}
			if err := s.Release(t.Context(), r.Name, prefetch.OnRemoveRemove); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Lookup(t.Context(), r.Name); !errors.Is(err, prefetch.ErrNotFound) {
				t.Errorf("lookup after remove: %v", err)
			}
			for _, d := range want {
				if has(t, s, d) {
					t.Errorf("layer %s left after remove", d)
				}
			}
		})
	}
}

func TestEmbeddedRejectsCorruptBlob(t *testing.T) {
	// A registry (or proxy) serving bytes that do not match the digest must fail the pull and leave
	// no blob behind.
	reg := imagetest.NewRegistry(t, imagetest.Options{})
	img := reg.PushRandom(t, "warmd-emb/verify:v1", 32<<10, 2)
	bad := imagetest.LayerDigests(t, img)[1]
	reg.Corrupt(bad)
	s, err := embedded.New(embedded.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Resolve(t.Context(), reg.Ref("warmd-emb/verify:v1"))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Pull(t.Context(), r, nil)
	if err == nil {
		t.Fatal("pull of a corrupt layer succeeded")
	}
	t.Logf("pull failed as it should: %v", err)
	if has(t, s, bad) {
		t.Errorf("corrupt layer %s was committed", bad)
	}
	if _, err := s.Lookup(t.Context(), r.Name); !errors.Is(err, prefetch.ErrNotFound) {
		t.Errorf("a failed pull left an image record: %v", err)
	}
}

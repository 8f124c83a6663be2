package weights_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warmd.io/warmd/internal/canary"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// beside returns a data dir with a canary directory next to it, and a separate source dir holding a
// small loadable model.
func beside(t *testing.T) (data, src string, c *canary.Dir, m fakeModel) {
	t.Helper()
	c = canary.New(t)
	data = filepath.Join(filepath.Dir(c.Path), "data")
	src = t.TempDir()
	m = newFakeModel(5, 3000, 2000)
	m.writeDir(t, src)
	return data, src, c, m
}

// The engine refuses an unsafe revision itself, whoever calls it: config validation is not the only
// gate between a revision and snapshots/<rev>, refs/<rev> and the staging dir.
func TestEngineRefusesUnsafeRevisions(t *testing.T) {
	t.Parallel()
	data, src, c, _ := beside(t)
	e := newEngine(t, data, nil)
	for _, rev := range []string{"../../../../canary/rev", "../../../../../canary/rev", "a/b", "..", ".", "x\ny", "/abs", strings.Repeat("r", 300)} {
		m := fileModel("acme/rev", src)
		m.Revision = rev
		st, err := e.Fetch(context.Background(), m, nil)
		if err == nil || !strings.Contains(err.Error(), "revision") || st.State != prefetch.StateFailed {
			t.Errorf("revision %q: %v (%s); want a refusal naming the revision", rev, err, st.State)
		}
		if strings.ContainsAny(st.Reason, "\n") {
			t.Errorf("revision %q: the reason carries a raw newline: %q", rev, st.Reason)
		}
	}
	for _, name := range []string{"../../../canary", "a/b/c", "org/", "/", ".", strings.Repeat("n", 300)} {
		if _, err := e.Fetch(context.Background(), fileModel(name, src), nil); err == nil {
			t.Errorf("model name %q accepted", name)
		}
		if _, err := e.Evict(name); err == nil {
			t.Errorf("Evict(%q) accepted", name)
		}
	}
	c.Check(t)
	if ents, _ := os.ReadDir(filepath.Join(data, "weights")); len(ents) != 1 || ents[0].Name() != ".staging" {
		t.Errorf("the weights dir holds %v after refused fetches", ents)
	}
}

// A directory of the published model swapped for a link (what a pod with write access to the cache
// could do) is never written, linked or collected through: publishing fails with ErrSymlink and the
// link's target is untouched. Without that, blob GC deleted every file of the target directory.
func TestPublishNeverWritesThroughPlantedLinks(t *testing.T) {
	t.Parallel()
	for _, planted := range []string{"blobs", "snapshots", "refs", ""} {
		t.Run("planted-"+planted, func(t *testing.T) {
			data, src, c, m := beside(t)
			e := newEngine(t, data, nil)
			if _, err := e.Fetch(context.Background(), fileModel("acme/m", src), nil); err != nil {
				t.Fatal(err)
			}
			dir := e.ModelDir("acme/m")
			target := filepath.Join(dir, planted)
			if planted == "" { // the staging dir of the next fetch
				target = filepath.Join(data, "weights", ".staging", "models--acme--m@v2")
			}
			os.RemoveAll(target)
			if err := os.Symlink(c.Path, target); err != nil {
				t.Fatal(err)
			}
			m2 := fileModel("acme/m", src)
			m2.Revision = "v2"
			_, err := e.Fetch(context.Background(), m2, nil)
			if !errors.Is(err, fsroot.ErrSymlink) {
				t.Errorf("fetch through a planted %s link: %v; want ErrSymlink", planted, err)
			}
			c.Check(t)
			_ = m
		})
	}
}

// Check re-verifies on handles: a snapshot entry swapped for a link to a file of the same size
// elsewhere is not the link warmd made, and a blob swapped for a link is not a blob.
func TestCheckRefusesSwappedEntries(t *testing.T) {
	t.Parallel()
	data, src, c, m := beside(t)
	e := newEngine(t, data, nil)
	md := fileModel("acme/m", src)
	st, err := e.Fetch(context.Background(), md, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A file of config.json's size outside the data dir.
	outside := filepath.Join(filepath.Dir(c.Path), "same-size")
	if err := os.WriteFile(outside, make([]byte, len(m["config.json"])), 0o644); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(st.SnapshotPath, "config.json")
	blobLink, _ := os.Readlink(entry)
	os.Remove(entry)
	os.Symlink(outside, entry)
	if _, err := e.Check(md); err == nil || !strings.Contains(err.Error(), "not the link warmd made") {
		t.Errorf("Check with a swapped snapshot entry: %v", err)
	}
	os.Remove(entry)
	os.Symlink(blobLink, entry)
	if _, err := e.Check(md); err != nil {
		t.Fatalf("Check after restoring the entry: %v", err)
	}
	blob := filepath.Join(filepath.Dir(entry), blobLink)
	os.Remove(blob)
	os.Symlink(outside, blob)
	if _, err := e.Check(md); err == nil {
		t.Error("Check accepted a blob that is a link")
	}
	c.Check(t)
}

// A name so deep that its snapshot link would not fit a symlink is refused before anything is
// downloaded, not after.
func TestKeysTooDeepForTheSnapshotLink(t *testing.T) {
	t.Parallel()
	st := objstore.NewMemory()
	m := newFakeModel(3, 2000)
	m.put(t, st, "b", "m/", objstore.PutOptions{})
	deep := "m/" + strings.Repeat("a/", 1400) + "f"
	if err := objstore.PutBytes(context.Background(), st, "b", deep, []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	e := s3Engine(t, st, data, nil)
	_, err := e.Fetch(context.Background(), config.Model{Name: "acme/deep", Source: "s3://b/m/", Revision: "main"}, nil)
	if err == nil || !strings.Contains(err.Error(), "shallower") {
		t.Fatalf("fetch of a 1401-level key: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "weights", ".staging")); len(ents) != 0 {
		t.Errorf("staged %v before refusing", ents)
	}
}

// A checksum manifest that is not a sha256sum list fails the model naming the manifest and the
// line, never quoting what is on it.
func TestManifestErrorsQuoteNoContent(t *testing.T) {
	t.Parallel()
	const secret = "SECRET-TOKEN-abcdefghijklmnopqrstuvwxyz0123456789-abcdefghijklmn"
	for _, manifest := range []string{
		secret + "  config.json\n",                           // 64 characters where the digest goes
		strings.Repeat("0", 64) + "  x\n" + secret + "\n",    // a bare line
		strings.Repeat("0", 64) + "\n",                       // no file name
		strings.Repeat("A", 70000) + "\n" + secret + "  x\n", // a line too long for the scanner
	} {
		st := objstore.NewMemory()
		m := newFakeModel(4, 2000)
		m.put(t, st, "b", "m/", objstore.PutOptions{})
		objstore.PutBytes(context.Background(), st, "b", "m/SHA256SUMS", []byte(manifest), objstore.PutOptions{})
		e := s3Engine(t, st, t.TempDir(), nil)
		res, err := e.Fetch(context.Background(), config.Model{Name: "acme/sums", Source: "s3://b/m/", Revision: "main", SHA256Manifest: "SHA256SUMS"}, nil)
		if err == nil || !strings.Contains(err.Error(), `"SHA256SUMS"`) || !strings.Contains(err.Error(), "line") {
			t.Errorf("manifest %.40q…: %v; want a failure naming the manifest and the line", manifest, err)
		}
		if strings.Contains(res.Reason, "SECRET") || strings.Contains(res.Reason, "AAAA") {
			t.Errorf("the reason quotes the manifest: %q", res.Reason)
		}
	}
}

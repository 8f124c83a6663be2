package file

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
)

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, s *Source) ([]string, []string) {
	t.Helper()
	l, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range l.Files {
		out = append(out, f.Name.String())
	}
	return out, l.Skipped
}

func read(t *testing.T, s *Source, name string) (string, error) {
	t.Helper()
	var b bytes.Buffer
	p := fsroot.MustPath(name)
	h, err := s.Head(context.Background(), p)
	if err != nil {
		return "", err
	}
	_, err = s.GetRange(context.Background(), p, 0, h.Size, &b)
	return b.String(), err
}

func TestLinksInsideAreFollowedOthersSkippedAndReported(t *testing.T) {
	top := t.TempDir()
	write(t, filepath.Join(top, "secret"), "SECRET")
	src := filepath.Join(top, "src")
	write(t, filepath.Join(src, "config.json"), "{}")
	write(t, filepath.Join(src, "sub", "real.bin"), "real")
	link(t, "sub/real.bin", filepath.Join(src, "inside.bin"))
	link(t, "../sub/real.bin", filepath.Join(src, "sub", "climbs-back.bin"))
	link(t, "../secret", filepath.Join(src, "leaves.bin"))
	link(t, filepath.Join(top, "secret"), filepath.Join(src, "absolute.bin"))
	link(t, "missing", filepath.Join(src, "dangling.bin"))
	link(t, "sub", filepath.Join(src, "dirlink"))
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New("file://" + src + "/")
	if err != nil {
		t.Fatal(err)
	}
	files, skipped := names(t, s)
	if want := []string{"config.json", "inside.bin", "sub/climbs-back.bin", "sub/real.bin"}; !slices.Equal(files, want) {
		t.Errorf("files %q, want %q", files, want)
	}
	for name, why := range map[string]string{"leaves.bin": "leads outside", "absolute.bin": "absolute symlink", "dangling.bin": "dangling",
		"dirlink": "symlink to a directory", "fifo": "not a regular file"} {
		if !slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(s, `"`+name+`": `) && strings.Contains(s, why) }) {
			t.Errorf("%s not reported as %q: %q", name, why, skipped)
		}
	}
	if got, err := read(t, s, "inside.bin"); err != nil || got != "real" {
		t.Errorf("inside.bin = %q, %v", got, err)
	}
	// A link swapped to lead outside after the listing is still refused when read.
	os.Remove(filepath.Join(src, "inside.bin"))
	link(t, "../secret", filepath.Join(src, "inside.bin"))
	if got, err := read(t, s, "inside.bin"); err == nil || strings.Contains(got, "SECRET") {
		t.Errorf("read through a link swapped to lead outside: %q, %v", got, err)
	}
	if _, err := read(t, s, "fifo"); err == nil {
		t.Error("a FIFO was read as a file")
	}
	if _, err := read(t, s, "nothere"); err == nil {
		t.Error("a missing file was read")
	}
}

func TestSymlinkedRootAndHFSnapshot(t *testing.T) {
	top := t.TempDir()
	mirror := filepath.Join(top, "mirror")
	write(t, filepath.Join(mirror, "config.json"), "{}")
	link(t, mirror, filepath.Join(top, "via-link"))
	s, err := New("file://" + filepath.Join(top, "via-link") + "/")
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := names(t, s); !slices.Equal(files, []string{"config.json"}) {
		t.Errorf("symlinked root lists %q", files)
	}
	if s.String() != "file://"+filepath.Join(top, "via-link")+"/" {
		t.Errorf("String() = %s; it names the configured dir", s)
	}

	repo := filepath.Join(top, "hub", "models--org--m")
	write(t, filepath.Join(repo, "blobs", "aaaa"), "{}")
	write(t, filepath.Join(repo, "blobs", "bbbb"), "weights")
	snap := filepath.Join(repo, "snapshots", "0123abcd")
	os.MkdirAll(filepath.Join(snap, "sub"), 0o755)
	link(t, "../../blobs/aaaa", filepath.Join(snap, "config.json"))
	link(t, "../../../blobs/bbbb", filepath.Join(snap, "sub", "model.safetensors"))
	link(t, "../../../../outside", filepath.Join(snap, "escape"))
	write(t, filepath.Join(top, "hub", "outside"), "SECRET")
	s, err = New("file://" + snap)
	if err != nil {
		t.Fatal(err)
	}
	files, skipped := names(t, s)
	if !slices.Equal(files, []string{"config.json", "sub/model.safetensors"}) || len(skipped) != 1 || !strings.Contains(skipped[0], "models--org--m") {
		t.Errorf("HF snapshot lists %q, skips %q", files, skipped)
	}
	if got, err := read(t, s, "sub/model.safetensors"); err != nil || got != "weights" {
		t.Errorf("read through the blob link: %q %v", got, err)
	}
}

func TestHostileFileNamesFailTheListing(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "config.json"), "{}")
	write(t, filepath.Join(src, "new\nline"), "x")
	s, _ := New("file://" + src)
	_, err := s.List(context.Background())
	if !errors.Is(err, fsroot.ErrUnsafePath) || !strings.Contains(err.Error(), `"new\nline": contains a control character`) {
		t.Errorf("List = %v", err)
	}
}

func TestNewRefusesWhatIsNotADir(t *testing.T) {
	for _, u := range []string{"file://relative", "s3://b/x", "file:///does/not/exist"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

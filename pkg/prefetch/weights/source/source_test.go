package source

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
)

func TestListerRefusesEveryUnsafeName(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"../x"}, `".." component`},
		{[]string{"a/../../b"}, `".." component`},
		{[]string{"/etc/passwd"}, "absolute"},
		{[]string{"a//b"}, "empty component"},
		{[]string{"./x"}, `"." component`},
		{[]string{"a/"}, "empty component"},
		{[]string{"nul\x00byte"}, "NUL"},
		{[]string{"bell\x07"}, "control character"},
		{[]string{"bad\xffutf8"}, "UTF-8"},
		{[]string{`win\path`}, "backslash"},
		{[]string{strings.Repeat("x", 256)}, "longer than 255"},
		{[]string{"a", "a/b"}, `"a": both a file and a directory (of "a/b")`},
		{[]string{"a/b/c", "a/b"}, `"a/b": both a file and a directory (of "a/b/c")`},
		{[]string{"x", "x"}, `"x": listed twice`},
	} {
		l := Lister{Fix: "rename them"}
		for _, n := range tc.names {
			l.Add(n, objstore.Object{Key: n, Size: 1})
		}
		_, err := l.Listing()
		if !errors.Is(err, fsroot.ErrUnsafePath) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "rename them") {
			t.Errorf("%q: %v; want ErrUnsafePath naming %q and the fix", tc.names, err, tc.want)
			continue
		}
		if strings.ContainsAny(err.Error(), "\x00\x07\xff") {
			t.Errorf("%q: the error carries raw bytes of the name: %q", tc.names, err)
		}
	}
}

func TestListerKeepsSafeNamesSorted(t *testing.T) {
	l := Lister{}
	for _, n := range []string{"b.safetensors", "a/config.json", ".hidden", "a b/ü"} {
		l.Add(n, objstore.Object{Key: "ignored/" + n, Size: 3})
	}
	l.Skip("dangling\nlink", "dangling symlink; skipped")
	got, err := l.Listing()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range got.Files {
		if f.Key != f.Name.String() {
			t.Errorf("Key %q differs from Name %q", f.Key, f.Name)
		}
		names = append(names, f.Key)
	}
	if fmt.Sprint(names) != "[.hidden a b/ü a/config.json b.safetensors]" {
		t.Errorf("files %q", names)
	}
	if len(got.Skipped) != 1 || got.Skipped[0] != `"dangling\nlink": dangling symlink; skipped` {
		t.Errorf("skipped %q", got.Skipped)
	}
}

func TestListerBoundsTheError(t *testing.T) {
	l := Lister{Fix: "fix"}
	for i := range 100000 {
		l.Add(fmt.Sprintf("../%d/%s", i, strings.Repeat("y", 200)), objstore.Object{})
	}
	_, err := l.Listing()
	if err == nil || len(err.Error()) > 2000 || !strings.Contains(err.Error(), "100000 listed name(s)") || !strings.Contains(err.Error(), "and 99995 more") {
		t.Errorf("error for 100000 bad names (%d bytes): %.300v", len(fmt.Sprint(err)), err)
	}
}

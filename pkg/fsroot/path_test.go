package fsroot

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	long := strings.Repeat("a", 256)
	cases := []struct {
		in     string
		reason string // "" = accepted
	}{
		{"config.json", ""},
		{"model-00001-of-00002.safetensors", ""},
		{"sub dir/with space/file.bin", ""},
		{"ünïcode/ファイル", ""},
		{".hidden/x", ""},
		{"a..b/c..", ""},
		{strings.Repeat("a", 255), ""},
		{"", "empty"},
		{"/etc/passwd", "absolute"},
		{"../x", `".." component`},
		{"a/../../b", `".." component`},
		{"snapshots/../..", `".." component`},
		{"./x", `"." component`},
		{"a/./b", `"." component`},
		{"a//b", "empty component"},
		{"a/", "empty component"},
		{"a\x00b", "NUL"},
		{"a\nb", "control character"},
		{"a\x7fb", "control character"},
		{"a\u0085b", "control character"},
		{`a\..\b`, "backslash"},
		{"\xff\xfe", "UTF-8"},
		{long, "longer than 255"},
		{strings.Repeat("abcdefgh/", 600), "longer than 4096"},
	}
	for _, tc := range cases {
		p, err := ParsePath(tc.in)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("ParsePath(%q) = %v, want accepted", tc.in, err)
			} else if p.String() != tc.in {
				t.Errorf("ParsePath(%q).String() = %q", tc.in, p)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParsePath(%q) accepted, want refused (%s)", tc.in, tc.reason)
			continue
		}
		if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("ParsePath(%q) = %v, want ErrUnsafePath naming %q", tc.in, err, tc.reason)
		}
		if strings.ContainsAny(err.Error(), "\x00\n\x7f") || len(err.Error()) > 400 {
			t.Errorf("ParsePath(%q) error carries raw or unbounded input: %q", tc.in, err)
		}
	}
}

func TestPathMethods(t *testing.T) {
	p := MustPath("models--a--b/snapshots/main/sub/f.json")
	if got := p.Dir().String(); got != "models--a--b/snapshots/main/sub" {
		t.Errorf("Dir = %q", got)
	}
	if got := p.Base(); got != "f.json" {
		t.Errorf("Base = %q", got)
	}
	if p.Depth() != 5 || !p.HasPrefix(MustPath("models--a--b")) || p.HasPrefix(MustPath("models--a")) {
		t.Errorf("Depth/HasPrefix wrong for %s", p)
	}
	if root := MustPath("x").Dir(); !root.IsRoot() || root.String() != "." || root.Base() != "" {
		t.Errorf("parent of a one-component path = %q, want the root", root)
	}
	if _, err := p.Child("a/b"); err == nil {
		t.Error("Child accepted a name with a slash")
	}
	if _, err := p.Child(".."); err == nil {
		t.Error(`Child accepted ".."`)
	}
	if got := (Path{}).Join(MustPath("a")).Join(Path{}); got.String() != "a" {
		t.Errorf("Join with the root = %q", got)
	}
}

func TestSymlinkTarget(t *testing.T) {
	cases := []struct {
		link, target string
		ok           bool
	}{
		{"snapshots/main/config.json", "../../blobs/abc", true},
		{"snapshots/main/sub/x", "../../../blobs/abc", true},
		{"snapshots/main/config.json", "../../../outside", false},
		{"a", "b", true},
		{"a", "../b", false},
		{"a/b", "c/../../d", false}, // ".." after a plain element: c may be a link
		{"x/esc", "s/s/s/s/../../../../canary", false},
		{"a/b/l", "../../c", true},
		{"a/b", "..", false},
		{"a/b", "c/./d", false},
		{"a/b", "c//d", false},
		{"a/b", "c/../../../d", false},
		{"a/b", "/etc/passwd", false},
		{"a/b", "", false},
		{"a/b", "x\x00y", false},
		{"d/l", "./../d/./x", false},
		{"d/l", "../d/x", true},
		{"d/l", "../..", false},
	}
	for _, tc := range cases {
		err := SymlinkTarget(MustPath(tc.link), tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("SymlinkTarget(%q, %q) = %v, want ok=%v", tc.link, tc.target, err, tc.ok)
		}
	}
}

func TestQuoteBoundsHostileNames(t *testing.T) {
	q := Quote(strings.Repeat("é", 200) + "\n")
	if len(q) > 140 || strings.Contains(q, "\n") || !strings.HasSuffix(q, "…") {
		t.Errorf("Quote of a long name = %q", q)
	}
	for _, name := range []string{strings.Repeat("\x03", 1000), strings.Repeat("\xff", 129), strings.Repeat("\u0085", 300)} {
		if q := Quote(name); len(q) > 133 || !strings.HasSuffix(q, "…") {
			t.Errorf("Quote of %d bytes that escape long = %d bytes: %s", len(name), len(q), q)
		}
	}
	if q := Quote("short\n"); q != `"short\n"` {
		t.Errorf("Quote of a short name = %s", q)
	}
}

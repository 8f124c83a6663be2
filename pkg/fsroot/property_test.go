package fsroot

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"warmd.io/warmd/internal/canary"
)

// checkPathProperty is the Path contract, for any string s: ParsePath either accepts s unchanged —
// then s, joined under a root and cleaned, stays strictly below the root and round-trips
// (filepath.Rel gives s back; Components, Dir and Base rebuild it; parsing String again gives the
// same Path) — or refuses it with a *PathError wrapping ErrUnsafePath that names a reason and
// prints the name escaped and bounded. It returns what went wrong, "" when the contract holds.
func checkPathProperty(s string) string {
	p, err := ParsePath(s)
	if err != nil {
		var pe *PathError
		switch {
		case !errors.Is(err, ErrUnsafePath) || !errors.As(err, &pe):
			return "refused without a *PathError wrapping ErrUnsafePath: " + err.Error()
		case pe.Reason == "" || pe.Name != s:
			return "refused without a reason, or naming another name: " + err.Error()
		case len(err.Error()) > 400:
			return "the refusal is unbounded"
		}
		for _, r := range err.Error() {
			if r < 0x20 || r == 0x7f {
				return "the refusal prints a raw control character"
			}
		}
		if !utf8.ValidString(err.Error()) {
			return "the refusal prints invalid UTF-8"
		}
		return ""
	}
	const root = "/data/root"
	joined := filepath.Clean(filepath.Join(root, s))
	rel, rerr := filepath.Rel(root, joined)
	switch {
	case p.String() != s:
		return "accepted but changed: " + p.String()
	case !strings.HasPrefix(joined, root+"/"):
		return "joined under a root it lands at " + joined
	case rerr != nil || rel != s || path.Clean(s) != s:
		return "does not round-trip through Join/Clean/Rel: " + rel
	case strings.Join(p.Components(), "/") != s || p.Depth() != strings.Count(s, "/")+1:
		return "Components do not rebuild it"
	case p.Dir().Join(MustPath(p.Base())).String() != s:
		return "Dir and Base do not rebuild it"
	case !p.HasPrefix(p.Dir()) || p.IsRoot():
		return "not below its own Dir"
	}
	if q, err := ParsePath(p.String()); err != nil || q != p {
		return "String does not parse back to the same Path"
	}
	for _, c := range p.Components() {
		if c == "" || c == "." || c == ".." || len(c) > MaxComponentLen || strings.ContainsAny(c, "/\\\x00") {
			return "accepted a bad component " + Quote(c)
		}
		if _, err := (Path{}).Child(c); err != nil {
			return "a component is refused by Child: " + err.Error()
		}
	}
	return ""
}

// checkSymlinkProperty: SymlinkTarget accepts exactly the relative targets of at most MaxPathLen
// bytes made of k leading ".." elements, k no more than the link's depth, followed by a valid Path
// (so no ".", "..", empty or control-character element after the climb); and every target it
// accepts resolves, lexically from the link's directory, inside the root.
func checkSymlinkProperty(link Path, target string) string {
	err := SymlinkTarget(link, target)
	rest, up := target, 0
	for strings.HasPrefix(rest, "../") {
		rest, up = rest[3:], up+1
	}
	_, perr := ParsePath(rest)
	want := len(target) <= MaxPathLen && up <= link.Dir().Depth() && perr == nil
	if (err == nil) != want {
		return "SymlinkTarget(" + Quote(link.String()) + ", " + Quote(target) + ") = " + fmt.Sprint(err) + ", want accepted=" + fmt.Sprint(want)
	}
	if err != nil && !errors.Is(err, ErrUnsafePath) {
		return "refused without ErrUnsafePath: " + err.Error()
	}
	if resolved := path.Clean(link.Dir().String() + "/" + target); err == nil && (resolved == ".." || strings.HasPrefix(resolved, "../")) {
		return "accepted " + Quote(target) + " resolves outside the root: " + Quote(resolved)
	}
	return ""
}

// hostileName draws a name from pieces that matter to path handling.
func hostileName(rng *rand.Rand) string {
	pieces := []string{"a", "b", "config.json", "/", "/", "//", ".", "..", "./", "../", "\\", "\x00", "\n", "\x7f", "\u0085",
		"é", "ファ", "\xff", "\xc3", " ", "models--x", "@", strings.Repeat("x", 100), strings.Repeat("y", 255), strings.Repeat("z/", 50)}
	var b strings.Builder
	for range rng.IntN(8) + 1 {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	if rng.IntN(50) == 0 {
		b.WriteString(strings.Repeat("deep/", 900)) // past MaxPathLen
	}
	return b.String()
}

func TestPathProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := range 50000 {
		s := hostileName(rng)
		if msg := checkPathProperty(s); msg != "" {
			t.Fatalf("case %d %s: %s", i, Quote(s), msg)
		}
		p, err := ParsePath(s)
		if err != nil {
			continue
		}
		accepted++
		if msg := checkSymlinkProperty(p, hostileName(rng)); msg != "" {
			t.Fatalf("case %d: %s", i, msg)
		}
	}
	if accepted < 2500 || accepted > 47500 {
		t.Errorf("%d of 50000 generated names accepted: the generator no longer tests both sides", accepted)
	}
}

// Accepted names, used as a Root's names, create files exactly there: under the root at the name,
// and nowhere else (the canary beside the root stays as it was).
func TestAcceptedPathsLandUnderTheRoot(t *testing.T) {
	c := canary.New(t)
	dir := filepath.Join(filepath.Dir(c.Path), "root")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	made := 0
	for made < 500 {
		s := hostileName(rng)
		p, err := ParsePath(s)
		if err != nil || len(s) > 1000 {
			continue
		}
		// MkdirAll + OpenFile rather than WriteFile: this is about where names land, and thousands
		// of fsyncs would only make the test slow.
		err = r.MkdirAll(p.Dir(), 0o755)
		var f *os.File
		if err == nil {
			f, err = r.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		}
		if err == nil {
			_, err = f.WriteString(s)
			f.Close()
		}
		if err != nil {
			// A file or a directory of an earlier name is in the way: that is a refusal, not a write elsewhere.
			if !errors.Is(err, ErrSymlink) && !strings.Contains(err.Error(), "not a directory") && !strings.Contains(err.Error(), "is a directory") &&
				!strings.Contains(err.Error(), "file exists") {
				t.Fatalf("WriteFile(%s): %v", Quote(s), err)
			}
			continue
		}
		made++
		got, err := os.ReadFile(filepath.Join(dir, s))
		if err != nil || string(got) != s {
			t.Fatalf("%s was not written at the root joined with it: %v", Quote(s), err)
		}
	}
	c.Check(t)
}

// FuzzParsePath checks the Path and SymlinkTarget contracts on arbitrary input (go test -fuzz).
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"config.json", "a/b/c", "../x", "/abs", "a//b", "./x", "a/", "a\x00b", "a\nb", `a\b`,
		"\xff", strings.Repeat("x", 256), "snapshots/../..", "models--a--b/snapshots/main/x", "é/ファ"} {
		f.Add(s, "../../blobs/x")
	}
	f.Fuzz(func(t *testing.T, s, target string) {
		if msg := checkPathProperty(s); msg != "" {
			t.Fatalf("%s: %s", Quote(s), msg)
		}
		if p, err := ParsePath(s); err == nil {
			if msg := checkSymlinkProperty(p, target); msg != "" {
				t.Fatal(msg)
			}
		}
	})
}

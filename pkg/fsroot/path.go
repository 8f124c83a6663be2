package fsroot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of a Path. Linux refuses longer names itself (NAME_MAX, PATH_MAX); refusing them here turns
// an endless "file name too long" retry into one clear error at the boundary.
const (
	MaxPathLen      = 4096
	MaxComponentLen = 255
)

// ErrUnsafePath is what every refused name wraps: errors.Is(err, ErrUnsafePath).
var ErrUnsafePath = errors.New("unsafe path")

// PathError says which name was refused and why. Its message quotes the name (escaped, cut to 128
// bytes): a name from a bucket or a bundle is hostile and must not reach a log or the Node raw.
type PathError struct {
	Name   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("%s %s: %s", ErrUnsafePath, Quote(e.Name), e.Reason)
}

func (e *PathError) Unwrap() error { return ErrUnsafePath }

// Quote renders an outside name for an error or a log line: Go-quoted (control and non-UTF-8 bytes
// escaped) and cut, with "…", so that the quoted form stays within 130 bytes however the name is
// made: a megabyte-long key, or one of control bytes that each quote to four, cannot flood a log.
func Quote(name string) string {
	const max = 128 // bytes of the quoted text between the quotes
	q := strconv.Quote(name)
	if len(q) <= max+2 {
		return q
	}
	cut := min(len(name), max)
	for {
		for cut > 0 && cut < len(name) && !utf8.RuneStart(name[cut]) {
			cut--
		}
		if q = strconv.Quote(name[:cut]); len(q) <= max+2 || cut == 0 {
			return q + "…"
		}
		cut--
	}
}

// Path is a validated relative path below a Root: slash-separated components, each a plain name.
// Every name that comes from outside warmd (an S3 key, a bundle entry, an index field, a file a pod
// wrote) becomes a Path through ParsePath before it touches the filesystem; a Root accepts nothing
// else. The zero Path is the Root itself.
type Path struct{ s string }

// ParsePath validates s: relative, 1..MaxPathLen bytes, components 1..MaxComponentLen bytes of valid
// UTF-8 without NUL, control characters or backslashes, none of them "." or "..", no leading,
// trailing or doubled slash. It does not clean: "a/../b" is refused, not turned into "b", because a
// name that needs cleaning was written by someone trying something.
func ParsePath(s string) (Path, error) {
	if reason := pathProblem(s); reason != "" {
		return Path{}, &PathError{Name: s, Reason: reason}
	}
	return Path{s: s}, nil
}

// MustPath is ParsePath for warmd's own constant names; it panics on a bad one (a programming error).
func MustPath(s string) Path {
	p, err := ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Join joins elements (each may hold slashes) with "/" and validates the result as one Path.
func Join(elems ...string) (Path, error) { return ParsePath(strings.Join(elems, "/")) }

func pathProblem(s string) string {
	switch {
	case s == "":
		return "empty name"
	case len(s) > MaxPathLen:
		return fmt.Sprintf("longer than %d bytes", MaxPathLen)
	case s[0] == '/':
		return "absolute (starts with /); names must be relative to their root"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	for _, c := range strings.Split(s, "/") {
		if r := componentProblem(c); r != "" {
			return r
		}
	}
	return ""
}

func componentProblem(c string) string {
	switch {
	case c == "":
		return "empty component (doubled or trailing slash)"
	case c == "." || c == "..":
		return fmt.Sprintf("has a %q component", c)
	case len(c) > MaxComponentLen:
		return fmt.Sprintf("a component is longer than %d bytes", MaxComponentLen)
	case !utf8.ValidString(c):
		return "not valid UTF-8"
	}
	for _, r := range c {
		switch {
		case r == 0:
			return "contains a NUL byte"
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return "contains a control character"
		case r == '\\':
			return "contains a backslash"
		}
	}
	return ""
}

// String returns the path with forward slashes; "." for the Root itself.
func (p Path) String() string {
	if p.s == "" {
		return "."
	}
	return p.s
}

// IsRoot reports whether p is the Root itself (the zero Path).
func (p Path) IsRoot() bool { return p.s == "" }

// Components returns p's names in order (none for the Root).
func (p Path) Components() []string {
	if p.s == "" {
		return nil
	}
	return strings.Split(p.s, "/")
}

// Dir returns p's parent (the Root for a one-component path).
func (p Path) Dir() Path {
	i := strings.LastIndexByte(p.s, '/')
	if i < 0 {
		return Path{}
	}
	return Path{s: p.s[:i]}
}

// Base returns p's last component ("" for the Root).
func (p Path) Base() string { return p.s[strings.LastIndexByte(p.s, '/')+1:] }

// Join returns p/q. Both are valid, so the result is too, except that it may exceed MaxPathLen, which
// the kernel then refuses with ENAMETOOLONG.
func (p Path) Join(q Path) Path {
	switch {
	case p.s == "":
		return q
	case q.s == "":
		return p
	}
	return Path{s: p.s + "/" + q.s}
}

// Child returns p/name for one validated component name.
func (p Path) Child(name string) (Path, error) {
	if r := componentProblem(name); r != "" || strings.Contains(name, "/") {
		if r == "" {
			r = "a single name may not contain a slash"
		}
		return Path{}, &PathError{Name: name, Reason: r}
	}
	if len(p.s)+1+len(name) > MaxPathLen {
		return Path{}, &PathError{Name: name, Reason: fmt.Sprintf("longer than %d bytes", MaxPathLen)}
	}
	return p.Join(Path{s: name}), nil
}

// Depth is the number of components.
func (p Path) Depth() int { return len(p.Components()) }

// HasPrefix reports whether q is p or lies below p.
func (p Path) HasPrefix(q Path) bool {
	return q.s == "" || p.s == q.s || strings.HasPrefix(p.s, q.s+"/")
}

// SymlinkTarget checks that a symlink at link with this target cannot lead a reader out of the Root,
// however the Root's other links are arranged: the target is relative, at most MaxPathLen bytes, its
// ".." elements come only at its start and are no more than the link's own depth, and every element
// after them is a plain name (no ".", "..", empty, NUL or control characters). A lexical check of the
// whole text is not enough: with s -> ".", the target "s/s/../.." is lexically inside the Root but
// climbs two levels above it. With ".." only as a prefix, each climb applies to the real directory
// holding the link (a Root creates links only at real paths, never through one), and every later
// element descends or is itself a link held to the same rule.
func SymlinkTarget(link Path, target string) error {
	bad := func(reason string) error { return &PathError{Name: target, Reason: reason} }
	switch {
	case target == "":
		return bad("empty symlink target")
	case len(target) > MaxPathLen:
		return bad(fmt.Sprintf("symlink target longer than %d bytes", MaxPathLen))
	case target[0] == '/':
		return bad("absolute symlink target; targets must be relative and stay inside their root")
	case !utf8.ValidString(target):
		return bad("symlink target is not valid UTF-8")
	}
	depth, up, plain := link.Dir().Depth(), 0, false
	for _, c := range strings.Split(target, "/") {
		if c == ".." {
			if plain {
				return bad(`symlink target climbs ("..") after descending; only leading ".." elements are allowed`)
			}
			if up++; up > depth {
				return bad(fmt.Sprintf("symlink target climbs above the root from %s", link))
			}
			continue
		}
		if r := componentProblem(c); r != "" {
			return bad("symlink target: " + r)
		}
		plain = true
	}
	if !plain {
		return bad("symlink target names no entry (only \"..\" elements)")
	}
	return nil
}

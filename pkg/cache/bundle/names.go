package bundle

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"warmd.io/warmd/pkg/fsroot"
)

// checkName accepts only names that are a valid fsroot.Path (relative, clean, 1..4096 bytes, elements
// 1..255 bytes of UTF-8 without control characters or backslashes, no "." or "..") and hold none of
// the reader's own temp-file marker. Its error gives the reason without the name: a name that did not
// pass is never shown.
func checkName(name string) (fsroot.Path, error) {
	p, err := fsroot.ParsePath(name)
	if err != nil {
		var pe *fsroot.PathError
		if errors.As(err, &pe) {
			return fsroot.Path{}, errors.New(pe.Reason)
		}
		return fsroot.Path{}, errors.New("not a valid path")
	}
	if IsTemp(name) {
		return fsroot.Path{}, fmt.Errorf("name holds the temp-file marker %s", TempMarker)
	}
	return p, nil
}

// checkLinkTarget accepts a symlink target only when it cannot lead out of the tree, however the
// tree's other links are arranged (stricter than fsroot.SymlinkTarget, which judges the text alone,
// and which Root.Symlink applies as well): relative, ".." elements only at its start and no more of them
// than the link's own depth, then plain elements. A lexical check of the whole target is not enough:
// "a/.." is lexically ".", but when a is itself a link to "..", it resolves to the tree's parent.
// Requiring ".." only as a prefix closes that, because a ".." then always applies to the physical
// dir that holds the link (which is inside the tree), and every later element either descends or
// is itself a link held to the same rule.
func checkLinkTarget(link, target string) error {
	if target == "" {
		return errors.New("empty symlink target")
	}
	if strings.HasPrefix(target, "/") {
		return errors.New("absolute symlink target")
	}
	if len(target) > 4096 || !utf8.ValidString(target) || strings.ContainsFunc(target, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return errors.New("symlink target is too long or holds control characters")
	}
	depth := strings.Count(link, "/") // elements of the dir holding the link
	up, plain := 0, false
	for _, el := range strings.Split(target, "/") {
		switch {
		case el == "" || el == ".":
			return errors.New("symlink target has an empty or \".\" element")
		case el == "..":
			if plain {
				return errors.New("symlink target climbs (\"..\") after descending: only leading \"..\" elements are allowed")
			}
			if up++; up > depth {
				return errors.New("symlink target leaves the tree")
			}
		default:
			plain = true
		}
	}
	if !plain && up == depth {
		// "../.." from depth 2 names the tree's root itself: inside, but a link to the root makes
		// every path through it a loop; no cache writes one.
		return errors.New("symlink target names the tree's root")
	}
	return nil
}

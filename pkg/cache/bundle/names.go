package bundle

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkName accepts only clean, relative, slash-separated names inside the tree: 1..4096 bytes,
// elements 1..255 bytes, valid UTF-8 without control characters or backslashes, no "." or ".."
// elements, and none of the reader's own temp-file marker.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > 4096:
		return fmt.Errorf("name of %d bytes (at most 4096)", len(name))
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("absolute path %s", quote(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("name %s is not valid UTF-8", quote(name))
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return fmt.Errorf("name %s holds a control character or backslash", quote(name))
	case IsTemp(name):
		return fmt.Errorf("name %s holds the temp-file marker %s", quote(name), TempMarker)
	}
	for _, el := range strings.Split(name, "/") {
		switch {
		case el == "" || el == "." || el == "..":
			return fmt.Errorf("name %s has a %q element", quote(name), el)
		case len(el) > 255:
			return fmt.Errorf("name %s has an element of %d bytes (at most 255)", quote(name), len(el))
		}
	}
	return nil
}

// checkLinkTarget accepts a symlink target only when it cannot lead out of the tree, however the
// tree's other links are arranged: relative, ".." elements only at its start and no more of them
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
		return fmt.Errorf("absolute symlink target %s", quote(target))
	}
	if len(target) > 4096 || !utf8.ValidString(target) || strings.ContainsFunc(target, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return fmt.Errorf("symlink target %s is too long or holds control characters", quote(target))
	}
	depth := strings.Count(link, "/") // elements of the dir holding the link
	up, plain := 0, false
	for _, el := range strings.Split(target, "/") {
		switch {
		case el == "" || el == ".":
			return fmt.Errorf("symlink target %s has an empty or %q element", quote(target), ".")
		case el == "..":
			if plain {
				return fmt.Errorf("symlink target %s climbs (\"..\") after descending: only leading \"..\" elements are allowed", quote(target))
			}
			if up++; up > depth {
				return fmt.Errorf("symlink target %s leaves the tree", quote(target))
			}
		default:
			plain = true
		}
	}
	if !plain && up == depth {
		// "../.." from depth 2 names the tree's root itself: inside, but a link to the root makes
		// every path through it a loop; no cache writes one.
		return fmt.Errorf("symlink target %s names the tree's root", quote(target))
	}
	return nil
}

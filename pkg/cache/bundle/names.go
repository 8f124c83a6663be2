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
		return errors.New("absolute path")
	case !utf8.ValidString(name):
		return errors.New("name is not valid UTF-8")
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return errors.New("name holds a control character or backslash")
	case IsTemp(name):
		return fmt.Errorf("name holds the temp-file marker %s", TempMarker)
	}
	for i, el := range strings.Split(name, "/") {
		switch {
		case el == "" || el == "." || el == "..":
			return fmt.Errorf("name element %d is empty, \".\" or \"..\"", i)
		case len(el) > 255:
			return fmt.Errorf("name element %d has %d bytes (at most 255)", i, len(el))
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

package bundle

import (
	"errors"
	"fmt"

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
// tree's other links are arranged: fsroot.SymlinkTarget's rule (relative, ".." only as a prefix and
// no deeper than the link, then plain names). The error gives the rule broken, not the target text.
func checkLinkTarget(link, target string) error {
	p, err := fsroot.ParsePath(link)
	if err != nil {
		return err
	}
	var pe *fsroot.PathError
	if err := fsroot.SymlinkTarget(p, target); errors.As(err, &pe) {
		return errors.New(pe.Reason)
	} else if err != nil {
		return err
	}
	return nil
}

// Package source holds what the weight sources (s3/ for buckets, file/ for local mirrors) share:
// turning the names a source lists into validated fsroot Paths and refusing a listing that cannot be
// published as one tree. Each listed name becomes a file in the model's snapshot, so a bucket key
// such as "../../etc/cron.d/x", "/abs", "a//b" or "nl\nname" is outside input to refuse before the
// engine sees it, with the entry quoted safely and the fix named. It owns no I/O.
package source

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
)

// maxProblems bounds how many refused entries one error lists (a hostile bucket may list millions).
const maxProblems = 5

// Lister collects a source's entries and refuses the listing if any is unsafe. Add every entry,
// then call Listing.
type Lister struct {
	// Fix ends every refusal: what the owner of the source should do ("rename or delete the object
	// in the bucket").
	Fix string

	files    []prefetch.File
	skipped  []string
	problems []string
	refused  int
}

// Add validates name (relative to the model root) and keeps the entry, or records why not.
func (l *Lister) Add(name string, o objstore.Object) {
	p, err := fsroot.ParsePath(name)
	if err != nil {
		var pe *fsroot.PathError
		if errors.As(err, &pe) {
			l.problem(fsroot.Quote(pe.Name) + ": " + pe.Reason)
		} else {
			l.problem(fsroot.Quote(name) + ": " + err.Error())
		}
		return
	}
	o.Key = p.String()
	l.files = append(l.files, prefetch.File{Name: p, Object: o})
}

// Skip records an entry the source leaves out on purpose (e.g. a dangling link), with its reason.
func (l *Lister) Skip(name, why string) {
	l.skipped = append(l.skipped, fsroot.Quote(name)+": "+why)
}

// Refuse records an entry that makes the listing unusable, for a reason Add cannot see.
func (l *Lister) Refuse(name, why string) { l.problem(fsroot.Quote(name) + ": " + why) }

func (l *Lister) problem(s string) {
	l.refused++
	if len(l.problems) < maxProblems {
		l.problems = append(l.problems, s)
	}
}

// Listing returns the files sorted by name, or an error (wrapping fsroot.ErrUnsafePath) naming
// the refused entries (the first few) and the fix. Two entries with one name, and a name that is both a file and the
// directory of another ("a" and "a/b"), are refused too: they cannot both be published.
func (l *Lister) Listing() (prefetch.Listing, error) {
	slices.SortStableFunc(l.files, func(a, b prefetch.File) int { return strings.Compare(a.Key, b.Key) })
	names := make(map[string]bool, len(l.files))
	for i, f := range l.files {
		if i > 0 && l.files[i-1].Key == f.Key {
			l.problem(fsroot.Quote(f.Key) + ": listed twice")
			continue
		}
		names[f.Key] = true
	}
	for _, f := range l.files {
		for d := f.Name.Dir(); !d.IsRoot(); d = d.Dir() {
			if names[d.String()] {
				l.problem(fmt.Sprintf("%s: both a file and a directory (of %s)", fsroot.Quote(d.String()), fsroot.Quote(f.Key)))
				delete(names, d.String()) // once per directory
			}
		}
	}
	if l.refused > 0 {
		more := ""
		if l.refused > len(l.problems) {
			more = fmt.Sprintf("; and %d more", l.refused-len(l.problems))
		}
		return prefetch.Listing{}, fmt.Errorf("%w: %d listed name(s) cannot be published as files: %s%s; %s (warmd publishes only relative names made of plain components)",
			fsroot.ErrUnsafePath, l.refused, strings.Join(l.problems, "; "), more, l.Fix)
	}
	return prefetch.Listing{Files: l.files, Skipped: l.skipped}, nil
}

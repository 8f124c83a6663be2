package fsroot

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"warmd.io/warmd/internal/canary"
)

// FuzzConfinement runs arbitrary sequences of Root operations interleaved with what a hostile
// writer of the tree (a pod with the directory mounted) can do behind warmd's back — plant links to
// outside, swap directories for links, rename things — and asserts that nothing outside the Root
// changed: the canary beside it stays byte-identical and no new entry appears next to it. Each
// input byte pair is one step: an operation and the names it uses.
func FuzzConfinement(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 2, 3, 3, 4})
	f.Add([]byte{7, 0x12, 1, 0x12, 2, 0x12, 3, 0x12, 10, 0x12})
	f.Add([]byte{8, 0x30, 4, 0x31, 5, 0x32, 6, 0x33, 9, 0x34, 11, 0x35})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 64 {
			prog = prog[:64]
		}
		c := canary.New(t)
		top := filepath.Dir(c.Path)
		dir := filepath.Join(top, "root")
		r, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// The hostile writer works through an os.Root of the same dir: like a pod, which sees only its
		// mount, it cannot itself write outside (a link it follows resolves inside its own tree).
		hr, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer hr.Close()
		names := []Path{MustPath("a"), MustPath("a/b"), MustPath("a/b/c"), MustPath("d"), MustPath("d/e"), MustPath("x/y/z"), MustPath("a/d"), MustPath("e")}
		targets := []string{c.Path, filepath.Join(c.Path, "secret.txt"), "../canary", "../../canary/secret.txt", "../../../canary/etc",
			"b", "../d", "..", ".", "/", "c/../../../canary"}
		for i := 0; i+1 < len(prog); i += 2 {
			op, arg := prog[i]%13, prog[i+1]
			p, q := names[int(arg&7)], names[int(arg>>3&7)]
			target := targets[int(arg>>4)%len(targets)]
			data := []byte{op, arg}
			switch op {
			case 0: // the hostile writer plants a link (to anywhere) at p
				if !p.Dir().IsRoot() {
					hr.MkdirAll(p.Dir().String(), 0o755)
				}
				hr.RemoveAll(p.String())
				hr.Symlink(target, p.String())
			case 1: // the hostile writer swaps p's directory for a link to the canary
				if d := p.Dir(); !d.IsRoot() {
					hr.RemoveAll(d.String())
					hr.Symlink(c.Path, d.String())
				}
			case 2:
				r.MkdirAll(p, 0o755)
			case 3:
				r.WriteFile(p, data, 0o644)
			case 4:
				r.RemoveAll(p)
			case 5:
				r.Rename(p, q)
			case 6:
				r.Symlink(target, p)
			case 7:
				r.Link(p, q)
			case 8:
				if f, err := r.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err == nil {
					f.Write(data)
					f.Close()
				}
			case 9:
				r.Exchange(p, q)
			case 10:
				r.WalkDir(Path{}, func(wp Path, d os.DirEntry, err error) error {
					if err == nil && !wp.IsRoot() && arg&1 == 1 {
						r.Remove(wp)
					}
					return nil
				})
			case 11:
				r.Chtimes(p, time.Unix(0, 0), time.Unix(0, 0))
			case 12:
				if tmp, err := r.CreateTemp(p.Dir(), "t"); err == nil {
					tmp.Write(data)
					if arg&1 == 1 {
						tmp.Commit(q)
					} else {
						tmp.CommitNoReplace(p)
					}
				}
				r.ReadFile(p, 1<<20)
				r.Readlink(p)
				r.Lstat(p)
			}
		}
		c.Check(t)
		ents, _ := os.ReadDir(top)
		for _, e := range ents {
			if e.Name() != "canary" && e.Name() != "root" {
				t.Errorf("%s appeared beside the root", e.Name())
			}
		}
	})
}

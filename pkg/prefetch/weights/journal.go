package weights

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"warmd.io/warmd/pkg/fsroot"
)

// journal records finished chunks of one staged model so a restarted warmd (even after kill -9)
// refetches only what was not finished. It is a text file: one JSON header line naming exactly
// what is being fetched (source, files with sizes and ETags, chunk size) — any change discards the
// staging — then one line per event, appended with O_APPEND:
//
//	c <file> <chunk> [<crc>]  chunk written (WriteAt returned), with the chunk's CRC (hex) when the
//	                          store's checksum of the file is a CRC that combines
//	r <file>                  file reset (failed verification; its chunks are refetched)
//	v <file> <method> <digest> file verified
//
// A torn last line (no newline) is ignored. Lines are not fsynced one by one: after kill -9 the
// kernel still holds every completed write; after a power loss, verification catches a chunk the
// disk lost and the file is refetched. The data files and the journal are fsynced before publish.
type journal struct {
	mu       sync.Mutex
	once     sync.Once
	f        *os.File
	lock     *os.File
	done     map[[2]int]string // finished chunks → their CRC (hex) or ""
	verified map[int]verifiedEntry
}

type verifiedEntry struct{ method, digest string }

type journalHeader struct {
	Version   int           `json:"version"`
	Source    string        `json:"source"`
	Revision  string        `json:"revision"`
	ChunkSize int64         `json:"chunkSize"`
	Files     []journalFile `json:"files"`
}

type journalFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	ETag string `json:"etag,omitempty"`
}

// maxJournal bounds the journal read on resume: one line per chunk, so even a 10 TB model at 16 MiB
// chunks stays far below it.
const maxJournal = 256 << 20

// openJournal opens (or starts) the journal in dir below root. It takes an exclusive lock on dir so
// the daemon and `warmd prefetch` never write the same staging at once. fresh is true when earlier
// staging was discarded or absent.
func openJournal(root *fsroot.Root, dir fsroot.Path, h journalHeader) (j *journal, fresh bool, err error) {
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	lockName := fsroot.MustPath("lock")
	lock, err := root.OpenFile(dir.Join(lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, false, fmt.Errorf("staging %s is locked by another warmd process (daemon or `warmd prefetch`): %w; wait for it or stop it", root.Name(dir), err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	h.Version = 1
	want, _ := json.Marshal(h)
	path := dir.Join(fsroot.MustPath("journal"))
	j = &journal{lock: lock, done: map[[2]int]string{}, verified: map[int]verifiedEntry{}}
	if data, err := root.ReadFile(path, maxJournal); err == nil {
		header, rest, _ := strings.Cut(string(data), "\n")
		if header == string(want) {
			j.replay(rest)
			j.f, err = root.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return nil, false, err
			}
			if !strings.HasSuffix(rest, "\n") && rest != "" {
				// Terminate a torn line so the next record starts clean.
				if _, err := j.f.WriteString("\n"); err != nil {
					return nil, false, err
				}
			}
			return j, false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, fsroot.ErrTooLarge) {
		return nil, false, err
	}
	// Different (or no) fetch staged here: start over.
	entries, err := root.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	for _, e := range entries {
		if e.Name() == "lock" {
			continue
		}
		p, err := dir.Child(e.Name())
		if err == nil {
			err = root.RemoveAll(p)
		}
		if err != nil {
			return nil, false, fmt.Errorf("clean staging %s: %w", root.Name(dir), err)
		}
	}
	j.f, err = root.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, false, err
	}
	if _, err := j.f.Write(append(want, '\n')); err != nil {
		j.f.Close()
		return nil, false, err
	}
	return j, true, nil
}

func (j *journal) replay(rest string) {
	sc := bufio.NewScanner(strings.NewReader(rest))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case (len(f) == 3 || len(f) == 4) && f[0] == "c":
			fi, err1 := strconv.Atoi(f[1])
			ci, err2 := strconv.Atoi(f[2])
			if err1 == nil && err2 == nil {
				j.done[[2]int{fi, ci}] = strings.Join(f[3:], "")
			}
		case len(f) == 2 && f[0] == "r":
			if fi, err := strconv.Atoi(f[1]); err == nil {
				for k := range j.done {
					if k[0] == fi {
						delete(j.done, k)
					}
				}
				delete(j.verified, fi)
			}
		case len(f) == 4 && f[0] == "v":
			if fi, err := strconv.Atoi(f[1]); err == nil {
				j.verified[fi] = verifiedEntry{f[2], f[3]}
			}
		}
	}
	if !strings.HasSuffix(rest, "\n") && rest != "" {
		// The last line is torn: a cut "c 3 12" reads as "c 3 1", so drop whatever it claimed
		// (at worst one chunk is fetched again).
		i := strings.LastIndexByte(rest, '\n')
		f := strings.Fields(rest[i+1:])
		if len(f) >= 3 && f[0] == "c" {
			fi, _ := strconv.Atoi(f[1])
			ci, _ := strconv.Atoi(f[2])
			delete(j.done, [2]int{fi, ci})
		}
		if len(f) >= 2 && f[0] == "v" {
			fi, _ := strconv.Atoi(f[1])
			delete(j.verified, fi)
		}
	}
}

func (j *journal) isDone(file, chunk int) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.done[[2]int{file, chunk}]
	return ok
}

// chunkSum returns a finished chunk's CRC (hex), if one was journaled.
func (j *journal) chunkSum(file, chunk int) (string, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	v, ok := j.done[[2]int{file, chunk}]
	return v, ok && v != ""
}

func (j *journal) append(line string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.WriteString(line + "\n"); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	return nil
}

func (j *journal) chunkDone(file, chunk int, crc string) error {
	line := fmt.Sprintf("c %d %d", file, chunk)
	if crc != "" {
		line += " " + crc
	}
	if err := j.append(line); err != nil {
		return err
	}
	j.mu.Lock()
	j.done[[2]int{file, chunk}] = crc
	j.mu.Unlock()
	return nil
}

func (j *journal) reset(file int) error {
	if err := j.append(fmt.Sprintf("r %d", file)); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for k := range j.done {
		if k[0] == file {
			delete(j.done, k)
		}
	}
	delete(j.verified, file)
	return nil
}

func (j *journal) markVerified(file int, method, digest string) error {
	if digest == "" {
		digest = "-"
	}
	if err := j.append(fmt.Sprintf("v %d %s %s", file, method, digest)); err != nil {
		return err
	}
	j.mu.Lock()
	j.verified[file] = verifiedEntry{method, digest}
	j.mu.Unlock()
	return nil
}

func (j *journal) verifiedAs(file int) (verifiedEntry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	v, ok := j.verified[file]
	return v, ok
}

func (j *journal) sync() error { return j.f.Sync() }

func (j *journal) close() {
	j.once.Do(func() {
		j.f.Close()
		j.lock.Close()
	})
}

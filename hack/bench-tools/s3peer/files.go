package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// files runs the bench's own per-file operation (fsync, drop or read) on every file under dirs and
// returns the bytes covered. Only these files are touched: the machine's page cache and other
// processes' files are not ours to flush or drop.
func files(mode string, dirs []string) (int64, error) {
	var total int64
	buf := make([]byte, 16<<20)
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() && (mode != "read" || d.Type()&fs.ModeSymlink == 0) {
				return nil // warmd's snapshot links: read follows them to the blobs; fsync/drop see the blobs themselves
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil || !fi.Mode().IsRegular() {
				return err
			}
			switch mode {
			case "fsync":
				err = f.Sync()
			case "drop":
				if err = f.Sync(); err == nil {
					err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				}
			case "read":
				var n int64
				n, err = readAll(f, buf)
				if err == nil && n != fi.Size() {
					err = fmt.Errorf("read %d bytes of %d", n, fi.Size())
				}
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", mode, path, err)
			}
			total += fi.Size()
			return nil
		})
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// readAll reads f to its end in len(buf) reads (io.Copy into io.Discard would read 8 KiB at a time).
func readAll(f *os.File, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := f.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

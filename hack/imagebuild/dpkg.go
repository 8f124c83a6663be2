package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// dpkgDB is the part of a sysroot's dpkg database the image needs: which package shipped a library,
// and that package's status stanza. The image carries /var/lib/dpkg/status.d/<package> for every
// package it copies files from (as distroless images do), so vulnerability scanners (Trivy, Grype)
// can match the glibc version it ships, plus the package's copyright file.
type dpkgDB struct {
	owner   map[string]string // path → package[:arch]
	stanzas map[string][]byte // package[:arch] → status stanza
}

// readDpkg loads the database under sr; a sysroot without one yields an empty database (the libs
// then ship without package metadata, which verify reports).
func readDpkg(sr sysroot) (*dpkgDB, error) {
	db := &dpkgDB{owner: map[string]string{}, stanzas: map[string][]byte{}}
	root := filepath.Join(sr.dir, "var", "lib", "dpkg")
	lists, err := filepath.Glob(filepath.Join(root, "info", "*.list"))
	if err != nil {
		return nil, err
	}
	for _, l := range lists {
		pkg := strings.TrimSuffix(filepath.Base(l), ".list")
		b, err := os.ReadFile(l)
		if err != nil {
			return nil, fmt.Errorf("dpkg list %s: %w", l, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line != "" {
				db.owner[line] = pkg
			}
		}
	}
	status, err := os.ReadFile(filepath.Join(root, "status"))
	if os.IsNotExist(err) {
		return db, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dpkg status: %w", err)
	}
	for _, st := range bytes.Split(status, []byte("\n\n")) {
		st = bytes.TrimSpace(st)
		if len(st) == 0 {
			continue
		}
		name, archName := field(st, "Package"), field(st, "Architecture")
		if name == "" {
			continue
		}
		db.stanzas[name+":"+archName] = append(st, '\n')
		if _, ok := db.stanzas[name]; !ok {
			db.stanzas[name] = db.stanzas[name+":"+archName]
		}
	}
	return db, nil
}

// pkgOf returns the package that shipped the file at p (a path in the sysroot), trying the path as
// listed and its merged-/usr twin (/lib/x ↔ /usr/lib/x), since dpkg records the path as packaged.
func (db *dpkgDB) pkgOf(p string) string {
	for _, c := range []string{p, strings.TrimPrefix(p, "/usr"), path.Join("/usr", p)} {
		if pkg, ok := db.owner[c]; ok {
			return pkg
		}
	}
	return ""
}

// stanza returns the status stanza of pkg ("name" or "name:arch") and the bare package name.
func (db *dpkgDB) stanza(pkg string) ([]byte, string) {
	name, _, _ := strings.Cut(pkg, ":")
	if st, ok := db.stanzas[pkg]; ok {
		return st, name
	}
	return db.stanzas[name], name
}

func field(stanza []byte, key string) string {
	sc := bufio.NewScanner(bytes.NewReader(stanza))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

package cli

import (
	"path/filepath"
	"testing"

	goldenfile "warmd.io/warmd/internal/golden"
)

// golden compares got with testdata/<name> (internal/golden; -update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got)
}

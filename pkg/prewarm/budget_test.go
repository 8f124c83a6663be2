package prewarm

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemAvailable(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       int64
		ok         bool
	}{
		{"kernel format", "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n", 20000000 << 10, true},
		{"missing", "MemTotal:       24000000 kB\n", 0, false},
		{"not a number", "MemAvailable:   lots kB\n", 0, false},
		{"other unit", "MemAvailable:   20 MB\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := MemAvailable(p)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("MemAvailable = %d, %v; want %d, ok=%v", got, err, tc.want, tc.ok)
			}
		})
	}
	if got, err := MemAvailable(MemInfo); err != nil || got <= 0 {
		t.Fatalf("this machine's MemAvailable: %d, %v", got, err)
	}
}

func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		name              string
		max               int64
		pct               int
		avail, held, want int64
	}{
		{"cap wins", 10 << 30, 50, 100 << 30, 0, 10 << 30},
		{"memory wins", 64 << 30, 50, 20 << 30, 0, 10 << 30},
		{"running pre-warms count", 64 << 30, 50, 20 << 30, 4 << 30, 6 << 30},
		{"nothing left", 64 << 30, 50, 20 << 30, 12 << 30, 0},
		{"memory unknown (huge)", 64 << 30, 90, 1 << 62, 0, 64 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Budget(tc.max, tc.pct, tc.avail, tc.held); got != tc.want {
				t.Fatalf("Budget = %d, want %d", got, tc.want)
			}
		})
	}
}

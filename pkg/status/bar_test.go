package status

import "testing"

func TestTextBar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		done, total int64
		want        string
	}{
		{"empty", 0, 100, "[....................]   0%"},
		{"quarter", 25, 100, "[#####...............]  25%"},
		{"full", 100, 100, "[####################] 100%"},
		{"more done than total is full, not a panic", 150, 100, "[####################] 100%"},
		{"unknown total", 5, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := textBar(tc.done, tc.total, 20); got != tc.want {
				t.Errorf("textBar(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
			}
		})
	}
}

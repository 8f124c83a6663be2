package units

import "testing"

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{5 << 30, "5.0 GiB"}, {3 << 40, "3.0 TiB"},
	} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestRate(t *testing.T) {
	for _, tc := range []struct {
		bps  float64
		want string
	}{
		{850e6, "850 MB/s"}, {1.25e9, "1.25 GB/s"}, {0, "0 MB/s"},
	} {
		if got := Rate(tc.bps); got != tc.want {
			t.Errorf("Rate(%v) = %q, want %q", tc.bps, got, tc.want)
		}
	}
}

package phases

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkParse reports lines per second on the TP=4 log (CRI framing, ANSI prefixes, partial lines).
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/v0.11.0-v1-tp4.log")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Count(data, []byte("\n"))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(data), Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(lines*b.N)/b.Elapsed().Seconds(), "lines/s")
}

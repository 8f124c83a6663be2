package state

import (
	"errors"
	"strings"
	"testing"
)

func TestReason(t *testing.T) {
	if got := Reason(errors.New("line one\nline\ttwo \x1b[31mred\u202e\xff")); got != "line one\nline\ttwo [31mred" {
		t.Errorf("Reason = %q", got)
	}
	if Reason(nil) != "" {
		t.Error("nil error gave text")
	}
	long := Reason(errors.New(strings.Repeat("é", MaxReason)))
	if len(long) > MaxReason || !strings.HasSuffix(long, "...") || !strings.HasPrefix(long, "é") {
		t.Errorf("long reason: %d bytes, %q...", len(long), long[:10])
	}
}

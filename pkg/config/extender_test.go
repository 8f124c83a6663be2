package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestExtenderDefaultsValidate(t *testing.T) {
	var e Extender
	e.Default()
	if err := e.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if e.MaxBodyBytes != 6<<20 || e.MaxInFlight != 8 || e.MaxNodes != 10000 || e.RequestTimeout != 10*time.Second {
		t.Errorf("defaults = %+v", e)
	}
}

// TestExtenderValidateNamesEveryProblem: every bad flag is reported at once, by its name.
func TestExtenderValidateNamesEveryProblem(t *testing.T) {
	e := Extender{Listen: "no port here/", MaxBodyBytes: 1, MaxInFlight: 1000, MaxNodes: -1, RequestTimeout: time.Hour}
	err := e.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v, want a *ValidationError", err)
	}
	for _, flag := range []string{"--listen", "--max-body-bytes", "--max-in-flight", "--max-nodes", "--request-timeout"} {
		if !strings.Contains(err.Error(), flag+": ") {
			t.Errorf("no problem names %s:\n%v", flag, err)
		}
	}
	if len(ve.Problems) != 5 {
		t.Errorf("%d problems, want 5:\n%v", len(ve.Problems), err)
	}
}

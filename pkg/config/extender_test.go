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

// TestExtenderTLSFlags: the TLS flags come as a set — cert and key together, a client CA only with
// TLS and a plain listener for probes and metrics — and each wrong set is named.
func TestExtenderTLSFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		e    Extender
		want string // "" = valid
	}{
		"all":              {Extender{TLSCertFile: "c", TLSKeyFile: "k", ClientCAFile: "ca", MetricsListen: ":8889"}, ""},
		"tls only":         {Extender{TLSCertFile: "c", TLSKeyFile: "k"}, ""},
		"cert alone":       {Extender{TLSCertFile: "c"}, "--tls-cert-file/--tls-key-file: "},
		"ca without tls":   {Extender{ClientCAFile: "ca", MetricsListen: ":8889"}, "--client-ca-file: client certificates need TLS"},
		"ca without plain": {Extender{TLSCertFile: "c", TLSKeyFile: "k", ClientCAFile: "ca"}, "--client-ca-file: the kubelet"},
		"same address":     {Extender{MetricsListen: ":8888"}, "--metrics-listen: is the same address"},
		"bad address":      {Extender{MetricsListen: "8889"}, "--metrics-listen: "},
	} {
		tc.e.Default()
		err := tc.e.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate = %v, want %q", name, err, tc.want)
		}
	}
}

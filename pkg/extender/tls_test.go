package extender

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/internal/testenv/testcerts"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServerTLS serves over the config ServerTLS builds and checks who gets in: the scheduler's
// certificate from the client CA does; no certificate, or one from another CA, does not; a rotated
// server certificate is served without a restart; bad files fail the start by name.
func TestServerTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA, otherCA := testcerts.NewCA(t, "server-ca"), testcerts.NewCA(t, "client-ca"), testcerts.NewCA(t, "other-ca")
	files := TLSFiles{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), ClientCA: filepath.Join(dir, "ca.crt")}
	c, k := serverCA.Issue(t, "warmd-extender", true)
	writeFile(t, files.Cert, c)
	writeFile(t, files.Key, k)
	writeFile(t, files.ClientCA, clientCA.PEM)

	cfg, err := ServerTLS(files, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "anonymous"
		if len(r.TLS.PeerCertificates) > 0 {
			name = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		_, _ = io.WriteString(w, name)
	}))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()

	schedCert, schedKey := clientCA.Issue(t, "kube-scheduler", false)
	resp, err := testcerts.Client(t, serverCA, schedCert, schedKey).Get(srv.URL)
	if err != nil {
		t.Fatalf("the scheduler's certificate was refused: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "kube-scheduler" {
		t.Fatalf("served %q, want the client's name", body)
	}
	if _, err := testcerts.Client(t, serverCA, nil, nil).Get(srv.URL); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	strangerCert, strangerKey := otherCA.Issue(t, "stranger", false)
	if _, err := testcerts.Client(t, serverCA, strangerCert, strangerKey).Get(srv.URL); err == nil {
		t.Fatal("a client certificate from another CA was served")
	}

	// Rotation: a new pair from a new server CA is served once the reload interval has passed.
	newServerCA := testcerts.NewCA(t, "server-ca-2")
	c2, k2 := newServerCA.Issue(t, "warmd-extender", true)
	writeFile(t, files.Cert, c2)
	writeFile(t, files.Key, k2)
	deadline := time.Now().Add(3 * reloadEvery)
	for {
		cl := testcerts.Client(t, newServerCA, schedCert, schedKey)
		resp, err := cl.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate is not served after %s: %v", 3*reloadEvery, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// A rotation that does not load keeps the last good pair.
	writeFile(t, files.Key, []byte("not a key"))
	time.Sleep(reloadEvery + 200*time.Millisecond)
	resp, err = testcerts.Client(t, newServerCA, schedCert, schedKey).Get(srv.URL)
	if err != nil {
		t.Fatalf("a bad rotation stopped serving: %v", err)
	}
	resp.Body.Close()

	for name, f := range map[string]TLSFiles{
		"missing key":    {Cert: files.Cert},
		"bad pair":       {Cert: files.Cert, Key: files.Key},
		"no CA inside":   {Cert: files.Cert, Key: filepath.Join(dir, "k2"), ClientCA: files.Key},
		"absent CA file": {Cert: files.Cert, Key: filepath.Join(dir, "k2"), ClientCA: filepath.Join(dir, "nope")},
	} {
		writeFile(t, filepath.Join(dir, "k2"), k2)
		if _, err := ServerTLS(f, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%s: ServerTLS accepted it", name)
		} else if !strings.Contains(err.Error(), "TLS") && !strings.Contains(err.Error(), "CA") {
			t.Errorf("%s: error %q does not say what is wrong", name, err)
		}
	}
}

package extender

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// TLSFiles names the PEM files of the extender's TLS endpoint, as a mounted Secret provides them.
// Cert and Key are the server's certificate chain and key; ClientCA, when set, is the CA bundle that
// signs the scheduler's client certificate (kube-scheduler's extender tlsConfig certFile/keyFile):
// with it the endpoint refuses every connection without a certificate it signed.
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// reloadEvery bounds how often the files are looked at: a Secret update reaches the pod's mount
// within the kubelet's sync period (a minute or so), so a few seconds is prompt enough.
const reloadEvery = 5 * time.Second

// ServerTLS builds the endpoint's tls.Config from files. The files are read now, so a missing or
// bad one fails the start with its name, and read again when they change (a rotated Secret needs no
// restart); a change that does not load keeps the last good pair and is logged.
func ServerTLS(files TLSFiles, log *slog.Logger) (*tls.Config, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("TLS needs both a certificate and a key file")
	}
	r := &tlsReloader{files: files, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := r.current()
		out := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*c.cert}}
		if c.clientCAs != nil {
			out.ClientAuth, out.ClientCAs = tls.RequireAndVerifyClientCert, c.clientCAs
		}
		return out, nil
	}
	return base, nil
}

type tlsState struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool
	stamp     string // the files' sizes and mtimes when loaded
}

type tlsReloader struct {
	files TLSFiles
	log   *slog.Logger

	mu      sync.Mutex
	state   tlsState
	checked time.Time
}

// current gives the loaded pair, reloading first when reloadEvery has passed and a file changed.
func (r *tlsReloader) current() tlsState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) >= reloadEvery {
		r.checked = time.Now()
		if st, err := r.stamp(); err == nil && st != r.state.stamp {
			if err := r.loadLocked(); err != nil {
				r.log.Warn("extender TLS files changed but do not load; serving the previous certificate", "err", err)
			} else {
				r.log.Info("extender TLS files reloaded")
			}
		}
	}
	return r.state
}

func (r *tlsReloader) load() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = time.Now()
	return r.loadLocked()
}

func (r *tlsReloader) loadLocked() error {
	st, err := r.stamp()
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w (give PEM files of one pair)", r.files.Cert, r.files.Key, err)
	}
	var pool *x509.CertPool
	if r.files.ClientCA != "" {
		pem, err := readSmall(r.files.ClientCA)
		if err != nil {
			return err
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client CA file %s holds no PEM certificate (give the CA bundle that signs the scheduler's client certificate)", r.files.ClientCA)
		}
	}
	r.state = tlsState{cert: &pair, clientCAs: pool, stamp: st}
	return nil
}

// stamp names the files' current versions; a Secret mount swaps a symlink, so it stats through it.
func (r *tlsReloader) stamp() (string, error) {
	var s string
	for _, p := range []string{r.files.Cert, r.files.Key, r.files.ClientCA} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("TLS file: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// maxPEMBytes bounds a CA bundle read (a bundle of a few hundred certificates is well under it).
const maxPEMBytes = 1 << 20

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("client CA file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1)) // the file may grow while it is read
	if err != nil {
		return nil, fmt.Errorf("client CA file: %w", err)
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("client CA file %s is over %d bytes (give only the CA bundle)", path, maxPEMBytes)
	}
	return b, nil
}

// Package oci owns warmd's client side of registry access, shared by the image backends: credentials
// from docker config.json and kubernetes.io/dockerconfigjson files, containerd hosts.toml dirs, the
// plain-HTTP rule (loopback or explicitly configured registries only), and resolving a reference to
// the node platform's manifest. It does not store or unpack anything.
package oci

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Auth reads registry credentials from files. Files are read at every lookup, so a rotated Secret
// (kubelet rewrites the mounted file) takes effect at the next pull without a restart.
type Auth struct {
	// Files are docker config.json files ({"auths": {...}}), kubernetes.io/dockerconfigjson Secret
	// payloads (the same shape), legacy .dockercfg files (the host map alone), or directories where
	// such a Secret is mounted (holding .dockerconfigjson, config.json or .dockercfg).
	Files []string
}

type authEntry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
}

// Credentials returns the username and secret for host ("registry.example.com:5000"), or empty
// strings when no file names the host. An unreadable or malformed file is an error naming the file,
// so a broken Secret is reported rather than turning into an anonymous pull and a confusing 401.
func (a Auth) Credentials(host string) (string, string, error) {
	want := normalizeHost(host)
	for _, f := range a.Files {
		entries, err := readAuthFile(f)
		if err != nil {
			return "", "", err
		}
		for key, e := range entries {
			if normalizeHost(key) != want {
				continue
			}
			u, p, err := e.credentials()
			if err != nil {
				return "", "", fmt.Errorf("auth file %s, entry %q: %w", f, key, err)
			}
			return u, p, nil
		}
	}
	return "", "", nil
}

func (e authEntry) credentials() (string, string, error) {
	if e.IdentityToken != "" {
		return "", e.IdentityToken, nil
	}
	if e.Username != "" || e.Password != "" {
		return e.Username, e.Password, nil
	}
	if e.Auth == "" {
		return "", "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(e.Auth)
	if err != nil {
		return "", "", fmt.Errorf("auth is not base64 (%w): it must encode user:password", err)
	}
	u, p, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", "", errors.New(`auth does not decode to "user:password"`)
	}
	return u, p, nil
}

func readAuthFile(path string) (map[string]authEntry, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		found := false
		for _, name := range []string{".dockerconfigjson", "config.json", ".dockercfg"} {
			if _, err := os.Stat(filepath.Join(path, name)); err == nil {
				path, found = filepath.Join(path, name), true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("auth dir %s holds no .dockerconfigjson, config.json or .dockercfg (mount the Secret's key there or name the file)", path)
		}
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("auth file %s does not exist (fix imagePull.authFiles or mount the Secret): %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read auth file: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("auth file %s is not JSON (want a docker config.json or .dockerconfigjson): %w", path, err)
	}
	body := data
	if auths, ok := doc["auths"]; ok {
		body = auths
	}
	var entries map[string]authEntry
	if err := json.Unmarshal(body, &entries); err != nil {
		return nil, fmt.Errorf("auth file %s: \"auths\" is not a map of registry to credentials: %w", path, err)
	}
	return entries, nil
}

// normalizeHost maps the many spellings of a registry key (https://index.docker.io/v1/, docker.io,
// registry-1.docker.io, host:port/path) to one host name.
func normalizeHost(h string) string {
	h = strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(h), "https://"), "http://")
	h, _, _ = strings.Cut(h, "/")
	switch h {
	case "index.docker.io", "registry-1.docker.io", "docker.io":
		return "docker.io"
	}
	return h
}

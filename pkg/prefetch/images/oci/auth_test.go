package oci

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuthCredentials(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name      string
		file      string // content; "" means a missing file
		asDir     string // write the content under this name in a dir and pass the dir
		host      string
		user, pwd string
		wantErr   string
	}{
		{name: "docker config.json auth field", file: `{"auths":{"reg.example:5000":{"auth":"` + b64([]byte("u:p:w")) + `"}}}`, host: "reg.example:5000", user: "u", pwd: "p:w"},
		{name: "username and password fields", file: `{"auths":{"https://reg.example/v2/":{"username":"a","password":"b"}}}`, host: "reg.example", user: "a", pwd: "b"},
		{name: "Docker Hub spellings are one host", file: `{"auths":{"https://index.docker.io/v1/":{"auth":"` + b64([]byte("d:h")) + `"}}}`, host: "registry-1.docker.io", user: "d", pwd: "h"},
		{name: "identity token", file: `{"auths":{"r.io":{"identitytoken":"tok"}}}`, host: "r.io", pwd: "tok"},
		{name: "legacy .dockercfg map", file: `{"r.io":{"auth":"` + b64([]byte("x:y")) + `"}}`, host: "r.io", user: "x", pwd: "y"},
		{name: "mounted kubernetes.io/dockerconfigjson Secret dir", asDir: ".dockerconfigjson", file: `{"auths":{"r.io":{"username":"s","password":"t"}}}`, host: "r.io", user: "s", pwd: "t"},
		{name: "host not listed: anonymous", file: `{"auths":{"r.io":{"username":"s","password":"t"}}}`, host: "other.io"},
		{name: "bad base64 names the fix", file: `{"auths":{"r.io":{"auth":"!!"}}}`, host: "r.io", wantErr: "must encode user:password"},
		{name: "not JSON", file: `auths: yaml`, host: "r.io", wantErr: "is not JSON"},
		{name: "missing file names the setting", host: "r.io", wantErr: "fix imagePull.authFiles"},
		{name: "Secret dir without the key", asDir: "other", file: `{}`, host: "r.io", wantErr: "holds no .dockerconfigjson"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "missing.json")
			switch {
			case tc.asDir != "":
				write(t, dir, tc.asDir, tc.file)
				path = dir
			case tc.file != "":
				path = write(t, dir, "config.json", tc.file)
			}
			u, p, err := Auth{Files: []string{path}}.Credentials(tc.host)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u != tc.user || p != tc.pwd {
				t.Errorf("got %q/%q, want %q/%q", u, p, tc.user, tc.pwd)
			}
		})
	}
}

func TestPlainHTTP(t *testing.T) {
	r := Registry{PlainHTTP: []string{"mirror.internal:5000"}}
	tests := []struct {
		host string
		want bool
	}{
		{"127.0.0.1:5000", true},
		{"localhost:5000", true},
		{"[::1]:5000", true},
		{"mirror.internal:5000", true},
		{"mirror.internal:5001", false},
		{"registry.example", false},
		{"10.0.0.1:5000", false},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			if got := r.IsPlainHTTP(tc.host); got != tc.want {
				t.Errorf("IsPlainHTTP(%s) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct{ in, name, host string }{
		{"vllm/vllm-openai:v0.11.0", "docker.io/vllm/vllm-openai:v0.11.0", "docker.io"},
		{"ubuntu", "docker.io/library/ubuntu:latest", "docker.io"},
		{"127.0.0.1:5000/a/b@sha256:" + strings.Repeat("a", 64), "127.0.0.1:5000/a/b@sha256:" + strings.Repeat("a", 64), "127.0.0.1:5000"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRef(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Name != tc.name || r.Host != tc.host {
				t.Errorf("ParseRef(%s) = %+v, want name %s host %s", tc.in, r, tc.name, tc.host)
			}
		})
	}
	if _, err := ParseRef("Not A Ref"); err == nil || !strings.Contains(err.Error(), "use e.g.") {
		t.Errorf("bad ref error %v should say what to use", err)
	}
}

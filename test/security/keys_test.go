package security

// Class 1: names from outside become paths. Every object key a bucket lists (and every file name a
// file:// source walks) is hostile: it must become a validated fsroot.Path before the engine sees
// it, or the model fails with the reason and nothing is published. Class 5 (weights): a checksum
// manifest's content never reaches errors, logs or status. Class 9 (sources): file:// sources that
// are symlinks or HF snapshot dirs work; links leaving the source, dangling and dir links are
// skipped and reported by name.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/prefetch"
)

// keyCase is one hostile listing: a loadable model plus keys under its prefix.
type keyCase struct {
	name string
	// keys are added (relative to the model's prefix) to a loadable model; on the stub a key the
	// model already has ("config.json") is listed twice.
	keys []string
	want string // what the failure reason must say
}

func climb(n int, rest string) string { return strings.Repeat("../", n) + rest }

// stubKeyCases are names only a hostile server serves (versitygw refuses or normalizes them).
func stubKeyCases() []keyCase {
	var climbing []string
	for n := 1; n <= 6; n++ { // from the snapshot dir, staging or a CLI target dir, 5 steps reach the canary; 6 stay in the test's temp dir
		climbing = append(climbing, climb(n, fmt.Sprintf("canary/pwned-%d", n)), climb(n, fmt.Sprintf("canary/newdir-%d/f", n)))
	}
	return []keyCase{
		{name: "dotdot", keys: climbing, want: `".." component`},
		{name: "nested-dotdot", keys: []string{"a/b/" + climb(7, "canary/pwned-nested")}, want: `".." component`},
		{name: "into-other-snapshot", keys: []string{"../other-rev/config.json"}, want: `".." component`},
		{name: "absolute", keys: []string{"/abs"}, want: "absolute"},
		{name: "double-slash", keys: []string{"a//b"}, want: "empty component"},
		{name: "dot", keys: []string{"./x"}, want: `"." component`},
		{name: "trailing-slash", keys: []string{"dir/"}, want: "ends with"},
		{name: "file-and-dir", keys: []string{"a", "a/b"}, want: "both a file and a directory"},
		{name: "duplicate", keys: []string{"config.json"}, want: "listed twice"},
		{name: "long-component", keys: []string{strings.Repeat("x", 256)}, want: "longer than 255"},
		{name: "long-path", keys: []string{strings.TrimSuffix(strings.Repeat(strings.Repeat("y", 250)+"/", 17), "/")}, want: "longer than 4096"},
		{name: "control", keys: []string{"nl\nname"}, want: "control character"},
	}
}

// versityKeyCases are hostile names versitygw stores as they are.
func versityKeyCases() []keyCase {
	return []keyCase{
		{name: "tab", keys: []string{"tab\there"}, want: "control character"},
		{name: "newline", keys: []string{"nl\nname"}, want: "control character"},
		{name: "del", keys: []string{"del\x7fname"}, want: "control character"},
		{name: "c1", keys: []string{"c1\u0085name"}, want: "control character"},
		{name: "backslash", keys: []string{`..\..\canary\pwned`}, want: "backslash"},
	}
}

// putKeyCases stores each case under its own prefix and returns the config's models.
func putKeyCases(t *testing.T, b *Bucket, cases []keyCase) string {
	t.Helper()
	var models []map[string]string
	for _, c := range cases {
		prefix := "m-" + c.name + "/"
		b.PutModel(prefix, SmallModel(t))
		for _, k := range c.keys {
			b.Put(prefix+k, []byte("hostile object "+c.name))
		}
		models = append(models, map[string]string{"name": "sec/" + c.name, "source": b.URL(prefix)})
	}
	return ModelsSection(models...)
}

// checkRefused asserts a model failed with the reason, naming the fix, quoting the name safely, and
// published nothing.
func checkRefused(t *testing.T, cacheRoot string, c keyCase, st prefetch.ModelStatus) {
	t.Helper()
	if st.State != prefetch.StateFailed {
		t.Errorf("%s: state %s, want failed (hostile keys %q)", c.name, st.State, c.keys)
	}
	if !strings.Contains(st.Reason, c.want) || !strings.Contains(st.Reason, "rename") {
		t.Errorf("%s: reason %q does not name the problem (%q) and the fix (rename)", c.name, st.Reason, c.want)
	}
	for _, r := range st.Reason {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			t.Errorf("%s: reason carries a raw control character %U: %q", c.name, r, st.Reason)
			break
		}
	}
	if len(st.Reason) > 2000 {
		t.Errorf("%s: reason is %d bytes; hostile names must be cut", c.name, len(st.Reason))
	}
	snaps := filepath.Join(cacheRoot, "models--sec--"+c.name, "snapshots")
	if ents, err := os.ReadDir(snaps); err == nil && len(ents) > 0 {
		t.Errorf("%s: published %s although the listing was refused", c.name, snaps)
	}
}

func modelNames(cases []keyCase) []string {
	var out []string
	for _, c := range cases {
		out = append(out, "sec/"+c.name)
	}
	return out
}

func TestHostileKeysDaemon(t *testing.T) {
	for _, srv := range []struct {
		name   string
		bucket func(*testing.T) *Bucket
		cases  []keyCase
	}{{"stub", StubBucket, stubKeyCases()}, {"versitygw", VersityBucket, versityKeyCases()}} {
		t.Run(srv.name, func(t *testing.T) {
			b := srv.bucket(t)
			w := NewWorld(t)
			w.Env = append(w.Env, b.Env...)
			models := putKeyCases(t, b, srv.cases)
			d := w.StartDaemon(w.Config(map[string]string{"s3": b.S3Section(), "models": models}))
			got := d.WaitModels(2*time.Minute, modelNames(srv.cases)...)
			for _, c := range srv.cases {
				checkRefused(t, filepath.Join(w.DataDir, "weights"), c, got["sec/"+c.name])
				if b.Stub != nil {
					for _, k := range c.keys {
						if b.Stub.Fetched("m-" + c.name + "/" + k) {
							t.Errorf("%s: the engine fetched hostile key %q", c.name, k)
						}
					}
				}
			}
			d.Stop()
			w.Check()
			if t.Failed() {
				t.Logf("daemon log:\n%s", tail(d.Log(), 6000))
			}
		})
	}
}

func TestHostileKeysCLI(t *testing.T) {
	for _, srv := range []struct {
		name   string
		bucket func(*testing.T) *Bucket
		cases  []keyCase
	}{{"stub", StubBucket, stubKeyCases()}, {"versitygw", VersityBucket, versityKeyCases()}} {
		t.Run(srv.name, func(t *testing.T) {
			b := srv.bucket(t)
			w := NewWorld(t)
			w.Env = append(w.Env, b.Env...)
			models := putKeyCases(t, b, srv.cases)
			// With --config: into <dataDir>/weights, every model in one run.
			cfg := w.Config(map[string]string{"s3": b.S3Section(), "models": models})
			r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "none", "-o", "json")
			if r.Code != 1 {
				t.Errorf("prefetch weights --config: exit %d, want 1:\n%s", r.Code, tail(r.Output(), 4000))
			}
			for _, c := range srv.cases {
				st := prefetch.ModelStatus{State: "missing from the JSON summary"}
				for _, s := range decodeSummary(t, r.Stdout) {
					if s.Model == "sec/"+c.name {
						st = s
					}
				}
				checkRefused(t, filepath.Join(w.DataDir, "weights"), c, st)
			}
			// SOURCE DIR: one model straight into an HF cache dir of the operator's choosing.
			for _, c := range srv.cases {
				dir := filepath.Join(w.Work, "hf-"+c.name)
				r := w.Warmd("prefetch", "weights", b.URL("m-"+c.name+"/"), dir, "--name", "sec/"+c.name,
					"--endpoint", b.Endpoint, "--progress", "none", "-o", "json")
				if r.Code != 1 {
					t.Errorf("%s: prefetch weights SOURCE DIR: exit %d, want 1:\n%s", c.name, r.Code, tail(r.Output(), 2000))
				}
				if s := decodeSummary(t, r.Stdout); len(s) == 1 {
					checkRefused(t, dir, c, s[0])
				} else {
					t.Errorf("%s: summary %q", c.name, r.Stdout)
				}
			}
			if b.Stub != nil {
				for _, c := range srv.cases {
					for _, k := range c.keys {
						if b.Stub.Fetched("m-" + c.name + "/" + k) {
							t.Errorf("%s: the CLI fetched hostile key %q", c.name, k)
						}
					}
				}
			}
			w.Check()
		})
	}
}

func decodeSummary(t *testing.T, out string) []prefetch.ModelStatus {
	t.Helper()
	var st []prefetch.ModelStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Errorf("prefetch weights -o json printed no summary (%v):\n%s", err, tail(out, 2000))
	}
	return st
}

// An unsafe revision becomes snapshots/<rev> and refs/<rev>: it is refused, by the config or by the
// engine, and nothing lands outside the data dir.
func TestHostileRevision(t *testing.T) {
	b := StubBucket(t)
	b.PutModel("m/", SmallModel(t))
	for _, rev := range []string{climb(4, "canary/rev"), climb(5, "canary/rev"), "a/b", "/abs", "..", ".", "x\ny"} {
		t.Run(fmt.Sprintf("%q", rev), func(t *testing.T) {
			w := NewWorld(t)
			w.Env = append(w.Env, b.Env...)
			cfg := w.Config(map[string]string{"s3": b.S3Section(),
				"models": ModelsSection(map[string]string{"name": "sec/rev", "source": b.URL("m/"), "revision": rev})})
			r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "none")
			if r.Code == 0 || !strings.Contains(r.Output(), "revision") {
				t.Errorf("prefetch weights with revision %q: exit %d, want a refusal naming the revision:\n%s", rev, r.Code, tail(r.Output(), 2000))
			}
			d, exited := w.StartDaemonOrExit(cfg)
			if d != nil {
				st := d.WaitModels(time.Minute, "sec/rev")["sec/rev"]
				if st.State != prefetch.StateFailed || !strings.Contains(st.Reason, "revision") {
					t.Errorf("daemon with revision %q: %s %q, want failed naming the revision", rev, st.State, st.Reason)
				}
				d.Stop()
			} else if !strings.Contains(exited.Stderr, "revision") {
				t.Errorf("daemon refused the config without naming the revision:\n%s", exited.Stderr)
			}
			w.Check()
		})
	}
}

// A checksum manifest whose lines are not sha256sum lines fails the model with the manifest's name
// and the line number, never its content: the manifest may be a symlink to a secret (file://) or
// carry whatever the bucket's writer put there.
func TestManifestContentNeverQuoted(t *testing.T) {
	const secret = "CANARY-SECRET-TOKEN-do-not-leak"
	t.Run("stub", func(t *testing.T) {
		b := StubBucket(t)
		w := NewWorld(t)
		w.Env = append(w.Env, b.Env...)
		b.PutModel("m/", SmallModel(t))
		// 64 characters where a digest belongs, then a plain secret line.
		b.Put("m/sha256sums", []byte(strings.Repeat("Z", 24)+secret+"0000000000  config.json\n"+secret+"\n"))
		cfg := w.Config(map[string]string{"s3": b.S3Section(), "models": ModelsSection(map[string]string{
			"name": "sec/manifest", "source": b.URL("m/"), "sha256Manifest": "sha256sums"})})
		checkManifestRefused(t, w, cfg, secret)
	})
	t.Run("file-symlink-to-secret", func(t *testing.T) {
		w := NewWorld(t)
		src := filepath.Join(w.Work, "src")
		writeFiles(t, src, SmallModel(t))
		if err := os.Symlink(filepath.Join(w.Canary.Path, "secret.txt"), filepath.Join(src, "sha256sums")); err != nil {
			t.Fatal(err)
		}
		cfg := w.Config(map[string]string{"models": ModelsSection(map[string]string{
			"name": "sec/manifest", "source": "file://" + src + "/", "sha256Manifest": "sha256sums"})})
		checkManifestRefused(t, w, cfg, secret)
	})
}

func checkManifestRefused(t *testing.T, w *World, cfg, secret string) {
	t.Helper()
	d := w.StartDaemon(cfg)
	st := d.WaitModels(time.Minute, "sec/manifest")["sec/manifest"]
	if st.State != prefetch.StateFailed || !strings.Contains(st.Reason, "sha256sums") {
		t.Errorf("daemon: %s %q, want failed naming the manifest", st.State, st.Reason)
	}
	status := string(d.StatusJSON())
	d.Stop()
	r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "plain", "--log-level", "debug")
	if r.Code != 1 || !strings.Contains(r.Output(), "sha256sums") {
		t.Errorf("prefetch weights: exit %d, want 1 naming the manifest:\n%s", r.Code, tail(r.Output(), 2000))
	}
	NoLeak(t, secret, map[string]string{"the daemon log": d.Log(), "/v1/status": status, "prefetch weights output": r.Output()})
	NoLeak(t, "ZZZZZZZZ", map[string]string{"the daemon log": d.Log(), "/v1/status": status, "prefetch weights output": r.Output()})
	w.Check()
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A file:// source whose directory is a symlink, and a Hugging Face snapshot dir (every entry a
// symlink into ../../blobs/), publish the model; links that leave the source, dangle or name a
// directory are skipped and reported by name, and what they point at is never read.
func TestFileSourceSymlinks(t *testing.T) {
	w := NewWorld(t)
	model := SmallModel(t)
	// An HF cache as `huggingface-cli download` leaves it.
	hf := filepath.Join(w.Work, "hub", "models--org--m")
	var rev = "0123456789abcdef0123456789abcdef01234567"
	for name, data := range model {
		sum := sha256.Sum256(data)
		blob := filepath.Join(hf, "blobs", hex.EncodeToString(sum[:]))
		writeFiles(t, filepath.Dir(blob), map[string][]byte{filepath.Base(blob): data})
		link := filepath.Join(hf, "snapshots", rev, name)
		os.MkdirAll(filepath.Dir(link), 0o755)
		if err := os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), link); err != nil {
			t.Fatal(err)
		}
	}
	snap := filepath.Join(hf, "snapshots", rev)
	// A plain mirror reached through a symlink.
	mirror := filepath.Join(w.Work, "mirror")
	writeFiles(t, mirror, model)
	linked := filepath.Join(w.Work, "mirror-link")
	must(t, os.Symlink(mirror, linked))
	// A mirror with hostile links beside real files.
	bad := filepath.Join(w.Work, "bad")
	writeFiles(t, bad, model)
	writeFiles(t, filepath.Join(bad, "sub"), map[string][]byte{"real.txt": []byte("in tree\n")})
	must(t, os.Symlink(filepath.Join(w.Canary.Path, "secret.txt"), filepath.Join(bad, "leaves-abs.txt")))
	must(t, os.Symlink("../../canary/secret.txt", filepath.Join(bad, "leaves-rel.txt")))
	must(t, os.Symlink("missing.txt", filepath.Join(bad, "dangling.txt")))
	must(t, os.Symlink("sub", filepath.Join(bad, "dirlink")))
	must(t, os.Symlink("sub/real.txt", filepath.Join(bad, "inside.txt")))

	cfg := w.Config(map[string]string{"models": ModelsSection(
		map[string]string{"name": "sec/hf-snapshot", "source": "file://" + snap + "/"},
		map[string]string{"name": "sec/linked-root", "source": "file://" + linked + "/"},
		map[string]string{"name": "sec/bad-links", "source": "file://" + bad + "/"},
	)})
	for _, via := range []string{"daemon", "cli"} {
		t.Run(via, func(t *testing.T) {
			os.RemoveAll(filepath.Join(w.DataDir, "weights"))
			os.RemoveAll(filepath.Join(w.DataDir, "state"))
			var got map[string]prefetch.ModelStatus
			var output, report string // the log, and the status as JSON
			if via == "daemon" {
				d := w.StartDaemon(cfg)
				got = d.WaitModels(time.Minute, "sec/hf-snapshot", "sec/linked-root", "sec/bad-links")
				report = string(d.StatusJSON())
				d.Stop()
				output = d.Log()
			} else {
				r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "none", "-o", "json", "--log-level", "info")
				got = map[string]prefetch.ModelStatus{}
				for _, s := range decodeSummary(t, r.Stdout) {
					got[s.Model] = s
				}
				output, report = r.Output(), r.Stdout
			}
			for _, name := range []string{"sec/hf-snapshot", "sec/linked-root", "sec/bad-links"} {
				st := got[name]
				if st.State != prefetch.StateReady {
					t.Errorf("%s: %s %q, want ready", name, st.State, st.Reason)
					continue
				}
				for file, want := range model {
					b, err := os.ReadFile(filepath.Join(st.SnapshotPath, file))
					if err != nil || string(b) != string(want) {
						t.Errorf("%s: %s in the snapshot differs from the source (%v)", name, file, err)
					}
				}
			}
			st := got["sec/bad-links"]
			if b, err := os.ReadFile(filepath.Join(st.SnapshotPath, "inside.txt")); err != nil || string(b) != "in tree\n" {
				t.Errorf("an in-tree file link was not followed: %q %v", b, err)
			}
			for _, skipped := range []string{"leaves-abs.txt", "leaves-rel.txt", "dangling.txt", "dirlink"} {
				if _, err := os.Lstat(filepath.Join(st.SnapshotPath, skipped)); err == nil {
					t.Errorf("%s was published", skipped)
				}
				if !strings.Contains(report, skipped) {
					t.Errorf("the %s status does not report skipping %s", via, skipped)
				}
				if !strings.Contains(output, skipped) {
					t.Errorf("the %s log does not report skipping %s", via, skipped)
				}
			}
			NoLeak(t, "CANARY-SECRET", map[string]string{via + " output": output, via + " status": report})
			w.Check()
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

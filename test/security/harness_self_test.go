package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warmd.io/warmd/pkg/prefetch"
)

// The harness itself: a loadable model from the stub publishes through the daemon and the CLI, the
// canary stays as it was, and Check notices a write beside the data dir.
func TestHarnessPublishesAGoodModel(t *testing.T) {
	b := StubBucket(t)
	b.PutModel("good/", SmallModel(t))
	w := NewWorld(t)
	w.Env = append(w.Env, b.Env...)
	cfg := w.Config(map[string]string{"s3": b.S3Section(),
		"models": ModelsSection(map[string]string{"name": "sec/good", "source": b.URL("good/")})})
	d := w.StartDaemon(cfg)
	if st := d.WaitModels(time.Minute, "sec/good")["sec/good"]; st.State != prefetch.StateReady {
		t.Fatalf("daemon: %s %q, want ready\n%s", st.State, st.Reason, tail(d.Log(), 4000))
	}
	d.Stop()
	if r := w.Warmd("prefetch", "weights", "--config", cfg, "--progress", "none"); r.Code != 0 {
		t.Fatalf("prefetch weights: exit %d\n%s", r.Code, r.Output())
	}
	w.Check()

	if err := os.WriteFile(filepath.Join(w.Dir, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	w.check(rec)
	os.Remove(filepath.Join(w.Dir, "stray"))
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "stray") {
		t.Errorf("Check reported %q for a file created beside the data dir", rec.errs)
	}
}

// recorder is a testing.TB that keeps what Check reports (only the methods Check calls).
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

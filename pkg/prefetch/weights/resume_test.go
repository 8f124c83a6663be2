package weights_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"warmd.io/warmd/internal/faultproxy"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch/weights"
)

// The kill -9 test re-executes this test binary as the prefetch process (TestMain dispatches on
// childEnv) and SIGKILLs it at random points: while downloading, verifying or publishing.
const childEnv = "WARMD_WEIGHTS_RESUME_CHILD"

const (
	resumeConcurrency = 4
	resumeChunk       = 1 << 20
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(resumeChild())
	}
	os.Exit(m.Run())
}

func resumeChild() int {
	get := os.Getenv
	st, err := objstore.NewS3(context.Background(), config.S3{Endpoint: get("CHILD_ENDPOINT")}, objstore.Options{
		Credentials: credentials.NewStaticCredentialsProvider(get("CHILD_ACCESS"), get("CHILD_SECRET"), "")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	bw, _ := strconv.ParseInt(get("CHILD_BW"), 10, 64)
	e, err := weights.New(weights.Options{DataDir: get("CHILD_DATA"), ChunkSize: resumeChunk, Concurrency: resumeConcurrency,
		BandwidthLimit: bw, Open: weights.SourceOpener(func(context.Context) (objstore.Store, error) { return st, nil })})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if _, err := e.Fetch(context.Background(), config.Model{Name: "acme/resume", Source: get("CHILD_SOURCE"), Revision: "main"}, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestResumeAfterKill kills the prefetch process with SIGKILL at random points, at least 20 times,
// and checks that the model is published intact and that finished chunks were not fetched again:
// the bytes the store served stay within the model size plus what was in flight at each kill.
func TestResumeAfterKill(t *testing.T) {
	t.Parallel()
	kills := 20
	if v, _ := strconv.Atoi(os.Getenv("WARMD_WEIGHTS_KILLS")); v > 0 {
		kills = v // scripts/soak.sh raises it
	}
	env := newS3Env(t)
	m := newFakeModel(5, 9<<20+5, 7<<20+3, 4<<20+1)
	// Uploaded with CRC32C checksums: resumes then also depend on the journaled chunk CRCs
	// combining into the store's checksum (a wrong one fails the child's verification).
	m.put(t, env.store(t, "", ""), env.bucket, "m/", objstore.PutOptions{ChecksumAlgorithm: "CRC32C"})
	proxy, err := faultproxy.Start(env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	killed, episodes := 0, 0
	for killed < kills {
		episodes++
		data := t.TempDir()
		served0 := proxy.BytesServed()
		episodeKills := 0
		for run := 0; ; run++ {
			if run > 400 {
				t.Fatalf("episode %d: no success after %d runs", episodes, run)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=1", "CHILD_ENDPOINT="+proxy.URL, "CHILD_ACCESS="+env.AccessKey,
				"CHILD_SECRET="+env.SecretKey, "CHILD_DATA="+data, "CHILD_SOURCE=s3://"+env.bucket+"/m/",
				"CHILD_BW="+strconv.Itoa(16<<20))
			out := &limitedBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			if killed < kills {
				select {
				case err = <-done:
				case <-time.After(time.Duration(20+rng.IntN(400)) * time.Millisecond):
					cmd.Process.Signal(syscall.SIGKILL)
					<-done
					killed++
					episodeKills++
					continue
				}
			} else {
				err = <-done
			}
			if err != nil {
				t.Fatalf("episode %d run %d: prefetch failed: %v\n%s", episodes, run, err, out)
			}
			break
		}
		checkSnapshot(t, filepath.Join(data, "weights", "models--acme--resume", "snapshots", "main"), m)
		if ents, _ := os.ReadDir(filepath.Join(data, "weights", ".staging")); len(ents) != 0 {
			t.Errorf("episode %d: staging left behind: %v", episodes, ents)
		}
		served := proxy.BytesServed() - served0
		// In flight at a kill: every worker's chunk, plus what the proxy had read ahead.
		bound := m.size() + int64(episodeKills)*(resumeConcurrency*resumeChunk+resumeChunk)
		t.Logf("episode %d: %d kills, served %d bytes for a %d-byte model (bound %d)", episodes, episodeKills, served, m.size(), bound)
		if served > bound {
			t.Errorf("episode %d: served %d bytes > %d: finished chunks were fetched again", episodes, served, bound)
		}
	}
}

type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if len(l.b) < 64<<10 {
		l.b = append(l.b, p...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

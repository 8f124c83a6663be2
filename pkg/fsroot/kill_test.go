package fsroot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// killChildEnv makes the test binary a writer child (see killChild) instead of running tests.
const killChildEnv = "WARMD_FSROOT_KILL_CHILD"

var killName = MustPath("state/records.json")

// TestWriteFileSurvivesKill9 kills a process that loops WriteFile on one name with SIGKILL at random
// points, at least 50 times, and checks after each kill that the name holds one complete content
// (the one before or a newer one, never a torn or older one), that whatever temps the kill left are
// recognized by IsTemp and swept by RemoveTemps without touching the published file, and that the
// next writer carries on. A kill -9 is a process crash: it shows the rename publishes all or
// nothing; it cannot show what fsync buys across a power loss (the page cache survives a kill).
func TestWriteFileSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a writer process 50+ times")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const minKills, maxKills = 50, 200
	var lastSeq uint64
	torn, swept := 0, 0 // kills that left a temp behind (mid-write), temps RemoveTemps removed
	kills := 0
	for ; kills < maxKills && (kills < minKills || torn == 0); kills++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteFileSurvivesKill9$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child has written at least once, then kill it somewhere in its loop.
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "writing\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("kill %d: child did not start writing: %q, %v", kills, line, err)
		}
		time.Sleep(time.Duration(rand.IntN(20_000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: child ended by itself (%v) instead of being killed: it stopped writing", kills, err)
		}

		data, err := r.ReadFile(killName, 4<<20)
		if err != nil {
			t.Fatalf("kill %d: the published name is unreadable: %v", kills, err)
		}
		seq, err := checkKillContent(data)
		if err != nil {
			t.Fatalf("kill %d: the published name holds a partial or mixed content: %v", kills, err)
		}
		if seq < lastSeq {
			t.Fatalf("kill %d: the published name went back from write %d to write %d", kills, lastSeq, seq)
		}
		lastSeq = seq

		es, err := r.ReadDir(killName.Dir())
		if err != nil {
			t.Fatal(err)
		}
		temps := 0
		for _, e := range es {
			switch {
			case e.Name() == killName.Base():
			case IsTemp(e.Name()):
				temps++
			default:
				t.Fatalf("kill %d: unexpected entry %q beside the published name (not a recognizable temp)", kills, e.Name())
			}
		}
		if temps > 0 {
			torn++
		}
		// Leave the debris for the next child every other kill (writers must not mind stale temps);
		// sweep it otherwise, as a restarting owner does.
		if kills%2 == 1 {
			n, err := r.RemoveTemps(killName.Dir())
			if err != nil {
				t.Fatalf("kill %d: RemoveTemps: %v", kills, err)
			}
			swept += n
			es, _ := r.ReadDir(killName.Dir())
			if len(es) != 1 || es[0].Name() != killName.Base() {
				t.Fatalf("kill %d: after RemoveTemps the dir holds %v, want only %s", kills, names(es), killName.Base())
			}
		}
	}
	if torn == 0 {
		t.Fatalf("no kill in %d landed between a temp's creation and its rename; the test did not exercise the window", kills)
	}
	// A final write and sweep leave exactly the published name.
	if _, err := r.RemoveTemps(killName.Dir()); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFile(killName, killContent(lastSeq+1), 0o644); err != nil {
		t.Fatal(err)
	}
	es, _ := r.ReadDir(killName.Dir())
	if len(es) != 1 {
		t.Errorf("after the last write and sweep the dir holds %v", names(es))
	}
	t.Logf("%d kills, %d mid-write (left temps), %d temps swept, last complete write #%d", kills, torn, swept, lastSeq)
}

// TestMain runs the writer child when the kill test re-executes the binary.
func TestMain(m *testing.M) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		os.Exit(killChild(dir))
	}
	os.Exit(m.Run())
}

// killChild loops WriteFile of distinct, self-checking contents to killName, continuing the sequence
// from what is published, until it is killed. It says "writing" after its first write.
func killChild(dir string) int {
	r, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var seq uint64
	if data, err := r.ReadFile(killName, 4<<20); err == nil {
		if seq, err = checkKillContent(data); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
	}
	for i := 0; ; i++ {
		seq++
		if err := r.WriteFile(killName, killContent(seq), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
		if i == 0 {
			os.Stdout.WriteString("writing\n")
		}
	}
}

// killContent is write seq's content: a header naming the sequence number, the payload's length
// and its sha256, then a payload (64 KiB to 1 MiB, derived from seq) large enough that a write
// takes several syscalls.
func killContent(seq uint64) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], seq)
	src := rand.NewChaCha8(seed)
	payload := make([]byte, 64<<10+rand.New(src).IntN(960<<10))
	_, _ = src.Read(payload)
	sum := sha256.Sum256(payload)
	return append([]byte(fmt.Sprintf("seq=%d len=%d sha256=%s\n", seq, len(payload), hex.EncodeToString(sum[:]))), payload...)
}

// checkKillContent verifies a content killContent made and returns its sequence number.
func checkKillContent(data []byte) (uint64, error) {
	hdr, payload, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return 0, fmt.Errorf("no header in %d bytes", len(data))
	}
	var seq uint64
	var n int
	var sum string
	if _, err := fmt.Sscanf(string(hdr), "seq=%d len=%d sha256=%s", &seq, &n, &sum); err != nil {
		return 0, fmt.Errorf("header %q: %w", hdr, err)
	}
	if len(payload) != n {
		return 0, fmt.Errorf("write #%d: payload is %d bytes, header says %d", seq, len(payload), n)
	}
	if got := sha256.Sum256(payload); hex.EncodeToString(got[:]) != sum {
		return 0, fmt.Errorf("write #%d: payload sha256 %x, header says %s", seq, got, sum)
	}
	if !bytes.Equal(data, killContent(seq)) {
		return 0, fmt.Errorf("write #%d: content is not the one write #%d makes", seq, seq)
	}
	return seq, nil
}

func names(es []os.DirEntry) []string {
	var s []string
	for _, e := range es {
		s = append(s, strconv.Quote(e.Name()))
	}
	return s
}

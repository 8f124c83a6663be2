// Package links gives a test's processes links of their own: each member is a network namespace with
// one veth pair to a hub namespace's bridge and a rate limit (tc tbf) on both ends, so a member's
// upload and download are each capped at its link rate whatever the others do, as separate machines'
// NICs are. Nothing is added to the host's own network: the hub, the bridge and every address live in
// namespaces the lab creates and deletes (ip netns), and traffic stays inside them. A listener for a
// member is opened inside its namespace from the test process (Listen), so an in-process server (an
// origin proxy, a relay to a loopback service) sits behind a link too, while its own outgoing dials
// still leave from the host's loopback.
package links

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Lab is a hub namespace with a bridge; members join it with Add.
type Lab struct {
	t      testing.TB
	prefix string // namespace and interface names start with it (unique per lab)
	subnet string // the first three octets of the members' /24
	hub    string
}

// Member is one namespace on the lab's bridge.
type Member struct {
	// NS is the namespace's name (ip netns); IP its address on the bridge.
	NS, IP string
	// Rate is the link's cap in bytes per second each way (0: unshaped).
	Rate int64
}

// Available says why a lab cannot be built here ("" when it can): it needs root and iproute2.
func Available() string {
	if os.Geteuid() != 0 {
		return "per-node links need root (network namespaces, veth, tc)"
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("per-node links need %s (iproute2) on PATH", tool)
		}
	}
	return ""
}

// New makes a lab whose members get addresses in 10.<a>.<b>.0/24 (a and b from the test process's
// PID, so labs of concurrent test binaries never share a name); it is deleted when t ends.
func New(t testing.TB) *Lab {
	t.Helper()
	if why := Available(); why != "" {
		t.Fatal(why)
	}
	pid := os.Getpid()
	l := &Lab{t: t, prefix: fmt.Sprintf("wl%d", pid%100000), subnet: fmt.Sprintf("10.%d.%d", 100+pid%100, (pid/100)%250)}
	l.hub = l.prefix + "-hub"
	t.Cleanup(l.delete)
	l.run("ip", "netns", "add", l.hub)
	l.run("ip", "-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", l.hub, "link", "set", "br0", "up")
	return l
}

// Add makes member name with host address <subnet>.<host> on a link capped at rate bytes/s each way
// (0: unshaped, for control traffic that must not queue behind bulk data).
func (l *Lab) Add(name string, host int, rate int64) *Member {
	l.t.Helper()
	m := &Member{NS: l.prefix + "-" + name, IP: fmt.Sprintf("%s.%d", l.subnet, host), Rate: rate}
	// Interface names are at most 15 bytes: the hub side is named by the host number.
	hubIf := fmt.Sprintf("%s-%d", l.prefix, host)
	l.run("ip", "netns", "add", m.NS)
	l.run("ip", "-n", m.NS, "link", "add", "eth0", "type", "veth", "peer", "name", hubIf, "netns", l.hub)
	l.run("ip", "-n", m.NS, "addr", "add", m.IP+"/24", "dev", "eth0")
	l.run("ip", "-n", m.NS, "link", "set", "eth0", "up")
	l.run("ip", "-n", m.NS, "link", "set", "lo", "up")
	l.run("ip", "-n", l.hub, "link", "set", hubIf, "master", "br0")
	l.run("ip", "-n", l.hub, "link", "set", hubIf, "up")
	if rate > 0 {
		// Upload: the member's side; download: the hub's side towards the member.
		l.shape(m.NS, "eth0", rate)
		l.shape(l.hub, hubIf, rate)
	}
	return m
}

// shape caps dev's egress at rate bytes/s with a token bucket: 10 ms of burst (at least 64 KiB) and a
// queue of 50 ms, the usual shape of a rate-limited NIC.
func (l *Lab) shape(ns, dev string, rate int64) {
	burst := max(rate/100, 64<<10)
	l.run("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", fmt.Sprintf("%dbps", rate),
		"burst", fmt.Sprint(burst), "latency", "50ms")
}

// Command runs name inside the member's namespace (ip netns exec).
func (m *Member) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", m.NS, name}, args...)...)
}

// Listen opens a TCP listener on addr inside the member's namespace (port "0" for any). The socket
// stays in that namespace; the goroutines that accept on it, and every other socket of the process,
// do not.
func (m *Member) Listen(addr string) (net.Listener, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + m.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("enter %s: %w", m.NS, err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread is stuck in the member's namespace: keep it locked so it dies with its goroutine.
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("leave %s: %w", m.NS, err)
	}
	runtime.UnlockOSThread()
	return ln, lerr
}

func (l *Lab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// delete removes every namespace of the lab (their veths and the bridge go with them).
func (l *Lab) delete() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], l.prefix+"-") {
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// Delete removes the member's namespace; its veth pair goes with it, so its address and host number
// are free again. Stop what runs in it first.
func (m *Member) Delete() error {
	if out, err := exec.Command("ip", "netns", "del", m.NS).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", m.NS, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Forward relays every connection accepted on ln to target (host:port on the host's loopback), both
// ways, until ln closes: a member's view of a service that listens on loopback only (an API server).
func Forward(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}

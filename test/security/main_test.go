// Package security tries warmd as an attacker would and proves it never touches anything outside its
// data dir. warmd runs as root on every GPU node; what it reads from outside is hostile: object keys
// and bytes from a bucket someone else can write, trees a vLLM pod mounts read-write, compile-cache
// bundles, checksum manifests, config values. Every case builds a World (harness_test.go): a fresh
// data dir with a canary directory beside it (internal/canary), runs the real warmd binary — `warmd
// run` as the DaemonSet does, and the one-shot CLI commands — against hostile input, and then asserts
// that the canary is byte-identical (tree, modes, links, contents), that nothing new appeared beside
// the data dir, that the hostile input failed with a reason naming the problem, and that no secret
// content reached logs or status.
//
// Real services where they accept the input (versitygw, through internal/testenv), and a hostile S3
// stub (internal/hostiles3) for what a real server refuses to store. `make test` runs the suite;
// outside it, cases needing a missing service skip naming the make target (Fatal in CI).
//
// Files: main_test.go builds warmd once; harness_test.go is the World/Daemon harness the other files
// use; keys_test.go covers object keys and file:// sources as paths (class 1), checksum manifests
// quoting content (class 5, weights) and file:// symlinks (class 9, sources); cache_test.go and
// bundle_test.go (with cache_harness_test.go) cover compile caches: pod-planted links and races
// (class 2), materialised sizes (3), entry digests (4), bucket text (5) and CLI writers beside the
// daemon (9).
package security

import (
	"testing"

	"warmd.io/warmd/internal/testenv"
)

// warmdBin is the warmd binary TestMain builds from this checkout, or WARMD_SECURITY_BIN: a warmd
// built elsewhere, e.g. from an older commit to show that each case fails there.
var warmdBin string

func TestMain(m *testing.M) {
	if rssWrapMain() {
		return
	}
	testenv.MainWithWarmd(m, &warmdBin, "WARMD_SECURITY_BIN")
}

// Package testenv gives tests the real services `make test` starts (scripts/testenv/up.sh): containerd
// 2.4.2 and 1.6.20, versitygw (S3), a docker-registry, and the kube-apiserver/etcd binaries envtest runs.
// A test that needs a missing service fails when CI is set (a skipped test would hide a broken install
// step) and otherwise skips with the make target that starts it.
package testenv

import (
	"os"
	"testing"
)

// Env variable names, written by scripts/testenv/up.sh.
const (
	EnvContainerd   = "WARMD_TEST_CONTAINERD"
	EnvContainerd16 = "WARMD_TEST_CONTAINERD16"
	EnvS3           = "WARMD_TEST_S3"
	EnvS3AccessKey  = "WARMD_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey  = "WARMD_TEST_S3_SECRET_KEY"
	EnvS3Root       = "WARMD_TEST_S3_ROOT"
	EnvRegistry     = "WARMD_TEST_REGISTRY"
	EnvAssets       = "KUBEBUILDER_ASSETS"
)

// Require returns the value of env var name, or ends the test: Fatal in CI, Skip elsewhere.
func Require(t testing.TB, name, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	Unavailable(t, what+" is not running ("+name+" is unset): run `make test`, or `make testenv` and source the env file it prints")
	return ""
}

// Unavailable ends a test that cannot get what it needs from this machine (a service, root for a
// tmpfs, xattrs on the S3 root): in CI, where `make test` provides all of it, that is a broken setup
// and the test fails; elsewhere it skips with msg, which should say how to get it.
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Containerd returns the socket of the containerd 2.4.2 daemon.
func Containerd(t testing.TB) string { return Require(t, EnvContainerd, "containerd 2.4.2") }

// Containerd16 returns the socket of Debian's containerd 1.6.20 daemon.
func Containerd16(t testing.TB) string { return Require(t, EnvContainerd16, "containerd 1.6.20") }

// S3 describes the versitygw server.
type S3 struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	// Root is the posix backend dir: <Root>/<bucket>/<key> files are objects, so big fixtures can be
	// placed (or hard-linked) directly instead of uploaded.
	Root string
}

// RequireS3 returns the S3 server's coordinates.
func RequireS3(t testing.TB) S3 {
	t.Helper()
	return S3{
		Endpoint:  Require(t, EnvS3, "versitygw (S3)"),
		AccessKey: Require(t, EnvS3AccessKey, "versitygw (S3)"),
		SecretKey: Require(t, EnvS3SecretKey, "versitygw (S3)"),
		Root:      Require(t, EnvS3Root, "versitygw (S3)"),
	}
}

// Assets returns the dir holding kube-apiserver and etcd for envtest.
func Assets(t testing.TB) string { return Require(t, EnvAssets, "kube-apiserver/etcd binaries") }

package testenv

import "testing"

// Tools the shipping tests run (scripts/tools.sh installs them; scripts/with-testenv.sh exports
// where they are).
const (
	EnvHelm       = "WARMD_TEST_HELM"
	EnvPromtool   = "WARMD_TEST_PROMTOOL"
	EnvPrometheus = "WARMD_TEST_PROMETHEUS"
	EnvQemuDir    = "WARMD_TEST_QEMU_DIR"
)

// Helm returns the helm binary built from hack/tools/helm.
func Helm(t testing.TB) string { return Require(t, EnvHelm, "helm") }

// Promtool returns Debian's promtool.
func Promtool(t testing.TB) string { return Require(t, EnvPromtool, "promtool") }

// Prometheus returns Debian's prometheus server.
func Prometheus(t testing.TB) string { return Require(t, EnvPrometheus, "prometheus") }

// QemuDir returns the directory holding qemu-aarch64-static.
func QemuDir(t testing.TB) string { return Require(t, EnvQemuDir, "qemu-user-static") }

// Package gonvmltest builds go-nvml mock systems for tests of the gonvml backend and of the commands
// that print its output: deterministic UUIDs and bus ids, MIG slices created through the mock's own
// MIG API, NVLink fabric registration, and a GB200 config the mocks lack. It is test support only.
package gonvmltest

// Package version holds warmd's version, set at build time with
// -ldflags "-X warmd.io/warmd/pkg/version.Version=v0.1.0".
package version

// Version of this build; "dev" when built without ldflags.
var Version = "dev"

// Package doclinks holds only a test: every relative link in the repository's Markdown files, and
// every repository path its docs, chart and manifests name (docs/x.md, pkg/config/types.go), resolves
// to a file or folder in the repository, so a moved or missing doc fails `make test` instead of a
// reader.
package doclinks

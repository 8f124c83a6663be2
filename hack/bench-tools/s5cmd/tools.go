//go:build tools

// Package s5cmd pins the s5cmd version scripts/bench/weights.sh compares warmd with. `go install
// github.com/peak/s5cmd/v2@v2.3.0` is refused by our module proxy (its go.mod has replace lines), so
// it is built from this nested module: go build -o BIN github.com/peak/s5cmd/v2
package s5cmd

import _ "github.com/peak/s5cmd/v2"

// Command warmd makes GPU nodes warm for vLLM before a pod needs them. Every command lives in
// pkg/cli; main only hands the process to it and exits with the status it returns.
package main

import (
	"os"

	"warmd.io/warmd/pkg/cli"
)

func main() { os.Exit(cli.Main()) }

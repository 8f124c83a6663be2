// Command warmd makes GPU nodes warm for vLLM before a pod needs them. main only wires streams,
// signals and exit codes; each subcommand parses its flags into an options struct and calls a run
// function.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"warmd.io/warmd/pkg/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := newRootCommand(cli.Standard()).ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

// exitCode maps an error to the process exit status: 0 ok, 2 for bad input (usage, config), the
// code an ExitError carries, 1 otherwise.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(os.Stderr, "warmd:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(os.Stderr, "warmd:", err)
	return 1
}

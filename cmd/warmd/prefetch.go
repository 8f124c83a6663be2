package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/cli"
)

// newPrefetchCommand groups the one-shot prefetch commands (images, weights) that do once, in the
// foreground, what `warmd run` keeps doing.
func newPrefetchCommand(s cli.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prefetch",
		Short: "Fetch what the config asks for once, in the foreground, with progress",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(
		newPrefetchImagesCommand(s),
		newPrefetchWeightsCommand(s),
	)
	return cmd
}

// checkProgress validates --progress, which both prefetch commands take.
func checkProgress(p string) error {
	switch p {
	case "auto", "bars", "plain", "none":
		return nil
	}
	return &cli.ExitError{Code: 2, Err: fmt.Errorf("--progress %q: use auto, bars, plain or none", p)}
}

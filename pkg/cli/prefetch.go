package cli

import (
	"github.com/spf13/cobra"
)

// newPrefetchCommand groups the one-shot prefetch commands (images, weights) that do once, in the
// foreground, what `warmd run` keeps doing.
func newPrefetchCommand(s IOStreams) *cobra.Command {
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

package cli

import (
	"github.com/spf13/cobra"
)

// NewRootCommand is the warmd command and its subcommands on streams s (tests pass buffers).
func NewRootCommand(s IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "warmd",
		Short: "Keep GPU nodes warm for vLLM: images, weights, compile caches, startup phases, readiness",
		Long: `warmd runs on every GPU node (a DaemonSet) and makes the node warm for vLLM before a pod needs it:
it pulls and pins the vLLM images, prefetches model weights from S3, keeps compile caches per GPU SKU,
measures every vLLM startup phase, and publishes what is warm on the Node.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &ExitError{Code: 2, Err: err} })
	root.AddCommand(
		newRunCommand(s),
		newStatusCommand(s),
		newVersionCommand(s),
		newGPUCommand(s),
		newPhasesCommand(s),
		newExtenderCommand(s),
		newPrefetchCommand(s),
		newCacheCommand(s),
	)
	return root
}

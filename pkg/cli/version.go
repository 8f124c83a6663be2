package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/version"
)

func newVersionCommand(s IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print warmd's version",
		Example: "  warmd version",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(s.Out, "warmd %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

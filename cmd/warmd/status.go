package main

import (
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cli"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/status"
)

type statusOptions struct {
	socket  string
	dataDir string
	output  string
	cluster clusterStatusOptions // --cluster: the cluster view (status_cluster.go)
}

func newStatusCommand(s cli.IOStreams) *cobra.Command {
	o := statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is warm on this node",
		Long: `Show this node's warm state, read from the running daemon's local socket: the daemon, its config,
and each part's progress. -o json|yaml prints the raw /v1/status object for scripts.`,
		Example: `  warmd status
  warmd status --data-dir /tmp/warmd-demo
  warmd status -o json | jq .sections.daemon
  warmd status --cluster --model Qwen/Qwen2.5-7B-Instruct -o wide`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.cluster.enabled {
				return runStatusCluster(cmd.Context(), s, o.output, o.cluster)
			}
			if err := cli.CheckFormat(o.output, "table", "json", "yaml"); err != nil {
				return err
			}
			sock := o.socket
			if sock == "" {
				sock = filepath.Join(o.dataDir, "warmd.sock")
			}
			st, err := api.NewClient(sock).Status(cmd.Context())
			if err != nil {
				return &cli.ExitError{Code: 3, Err: err}
			}
			if o.output != "table" {
				return cli.PrintObject(s.Out, o.output, st)
			}
			return status.Render(s.Out, st, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.socket, "socket", "", "daemon socket (default <data-dir>/warmd.sock)")
	f.StringVar(&o.dataDir, "data-dir", config.DefaultDataDir, "the daemon's data dir")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml (with --cluster also wide)")
	addClusterStatusFlags(f, &o.cluster)
	return cmd
}

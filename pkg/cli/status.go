package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/readiness"
	"warmd.io/warmd/pkg/status"
)

type statusOptions struct {
	socket   string
	dataDir  string
	output   string
	check    bool
	watch    bool
	interval time.Duration
	until    bool                 // with --watch: stop once the node is warm
	cluster  clusterStatusOptions // --cluster: the cluster view (status_cluster.go)
	now      func() time.Time     // a seam for golden tests; nil means time.Now
}

// errNotWarm is --check's answer when the node is not warm (exit 1).
var errNotWarm = errors.New("node is not warm")

func newStatusCommand(s IOStreams) *cobra.Command {
	return newStatusCommandWith(s, statusOptions{})
}

func newStatusCommandWith(s IOStreams, o statusOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is warm on this node",
		Long: `Show this node's warm state, read from the running daemon's local socket: a header (node, GPU SKU,
warm or not, uptime), the models with their weights' progress and predicted time-to-ready, images,
compile caches, recent vLLM starts with their phases, and the problems to act on.

--watch redraws every --interval with live progress; --check exits 1 when the node is not warm (for
probes and scripts; 3 when the daemon does not answer); -o json|yaml prints the raw /v1/status object.`,
		Example: `  warmd status
  warmd status --watch --until-warm --data-dir /tmp/warmd-demo
  warmd status --check >/dev/null && echo warm
  warmd status -o json | jq .sections.readiness.warm
  warmd status --cluster --model Qwen/Qwen2.5-7B-Instruct -o wide`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.cluster.enabled {
				return runStatusCluster(cmd.Context(), s, o.output, o.cluster)
			}
			if err := CheckFormat(o.output, "table", "json", "yaml"); err != nil {
				return err
			}
			if o.socket == "" {
				o.socket = filepath.Join(o.dataDir, "warmd.sock")
			}
			if o.watch {
				return watchStatus(cmd.Context(), s, o)
			}
			_, err := showStatus(cmd.Context(), s, o, IsTerminal(s.Out))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.socket, "socket", "", "daemon socket (default <data-dir>/warmd.sock)")
	f.StringVar(&o.dataDir, "data-dir", config.DefaultDataDir, "the daemon's data dir")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml (with --cluster also wide)")
	f.BoolVar(&o.check, "check", false, "exit 1 when the node is not warm")
	f.BoolVarP(&o.watch, "watch", "w", false, "redraw until interrupted")
	f.DurationVar(&o.interval, "interval", time.Second, "redraw interval for --watch")
	f.BoolVar(&o.until, "until-warm", false, "with --watch: stop once the node is warm")
	addClusterStatusFlags(f, &o.cluster)
	return cmd
}

// showStatus fetches and prints the status once; it reports whether the node is warm.
func showStatus(ctx context.Context, s IOStreams, o statusOptions, color bool) (bool, error) {
	st, err := api.NewClient(o.socket).Status(ctx)
	if err != nil {
		return false, &ExitError{Code: 3, Err: err}
	}
	r, _, _ := readiness.Section.Decode(st.Sections)
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	if o.output != "table" {
		err = PrintObject(s.Out, o.output, st)
	} else {
		err = status.Render(s.Out, st, now(), status.Options{Color: color})
	}
	if err != nil {
		return r.Warm, err
	}
	if o.check && !r.Warm {
		return false, &ExitError{Code: 1, Err: errNotWarm}
	}
	return r.Warm, nil
}

// watchStatus redraws the status: in place on a terminal, as separated frames elsewhere (logs, CI).
func watchStatus(ctx context.Context, s IOStreams, o statusOptions) error {
	tty := IsTerminal(s.Out)
	o.check = false
	for {
		var frame bytes.Buffer
		fs := s
		fs.Out = &frame
		warm, err := showStatus(ctx, fs, o, tty)
		if err != nil {
			return err
		}
		if tty {
			fmt.Fprint(s.Out, "\x1b[H\x1b[2J") // home + clear: redraw in place
		} else {
			fmt.Fprintf(s.Out, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
		}
		if _, err := s.Out.Write(frame.Bytes()); err != nil {
			return err
		}
		if o.until && warm {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.interval):
		}
	}
}

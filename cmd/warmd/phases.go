package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/cli"
	"warmd.io/warmd/pkg/phases"
)

type phasesOptions struct {
	output string
}

func newPhasesCommand(s cli.IOStreams) *cobra.Command {
	o := phasesOptions{}
	cmd := &cobra.Command{
		Use:   "phases [FILE|-]...",
		Short: "Split vLLM starts into phases from their logs",
		Long: `Read one or more vLLM container logs (raw output, kubelet CRI log files, kubectl logs --timestamps,
journald/syslog or collector-prefixed lines) and show how long each startup phase took: imports, engine
start, weight download and load, torch.compile, KV cache + warmup, CUDA graph capture, server up, first
200 on /health. It also says whether vLLM's compile cache hit. With no FILE, or FILE "-", it reads stdin.

-o table prints one column per log; -o json prints one object (an array for several logs); -o svg
writes a waterfall chart to stdout.`,
		Example: `  warmd phases /var/log/pods/default_vllm-0_*/vllm/0.log
  kubectl logs --timestamps vllm-0 | warmd phases -
  warmd phases cold.log warm.log -o svg > startup.svg`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckFormat(o.output, "table", "json", "svg"); err != nil {
				return err
			}
			if len(args) == 0 {
				args = []string{"-"}
			}
			rs := make([]phases.Result, 0, len(args))
			for _, a := range args {
				r, err := parsePhasesInput(s, a)
				if err != nil {
					return &cli.ExitError{Code: 1, Err: err}
				}
				rs = append(rs, r)
			}
			switch o.output {
			case "json":
				return phases.WriteJSON(s.Out, rs)
			case "svg":
				return phases.WriteSVG(s.Out, rs)
			}
			return phases.WriteTable(s.Out, rs)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or svg")
	return cmd
}

// parsePhasesInput parses one file (or stdin for "-"). The file's modification time supplies the year
// that vLLM's own timestamps lack.
func parsePhasesInput(s cli.IOStreams, name string) (phases.Result, error) {
	if name == "-" {
		return phases.Parse(s.In, phases.Options{Source: "-", Reference: time.Now()})
	}
	f, err := os.Open(name)
	if err != nil {
		return phases.Result{}, fmt.Errorf("open log: %w (pass a vLLM log file, or - for stdin)", err)
	}
	defer f.Close()
	ref := time.Now()
	if st, err := f.Stat(); err == nil {
		ref = st.ModTime()
	}
	return phases.Parse(f, phases.Options{Source: name, Reference: ref})
}

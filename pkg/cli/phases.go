package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/phases"
)

type phasesOptions struct {
	output string
}

func newPhasesCommand(s IOStreams) *cobra.Command {
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
			if err := CheckFormat(o.output, "table", "json", "svg"); err != nil {
				return err
			}
			if len(args) == 0 {
				args = []string{"-"}
			}
			// Nothing is written until every input is parsed, so a signal midway (an endless stdin,
			// a FIFO, /dev/zero) leaves no half table or half SVG behind.
			rs := make([]phases.Result, 0, len(args))
			for _, a := range args {
				r, err := parsePhasesInput(cmd.Context(), s, a)
				if err != nil {
					if ctxErr := cmd.Context().Err(); ctxErr != nil {
						return ctxErr
					}
					return &ExitError{Code: 1, Err: err}
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
// that vLLM's own timestamps lack. Reads stop when ctx ends, even a read blocked on a quiet stdin.
func parsePhasesInput(ctx context.Context, s IOStreams, name string) (phases.Result, error) {
	if name == "-" {
		return phases.Parse(ContextReader(ctx, s.In), phases.Options{Source: "-", Reference: time.Now()})
	}
	f, err := openContext(ctx, name)
	if err != nil {
		return phases.Result{}, fmt.Errorf("open log: %w (pass a vLLM log file, or - for stdin)", err)
	}
	defer f.Close()
	ref := time.Now()
	if st, err := f.Stat(); err == nil {
		ref = st.ModTime()
	}
	return phases.Parse(ContextReader(ctx, f), phases.Options{Source: name, Reference: ref})
}

// openContext opens name for reading, giving up when ctx ends: opening a FIFO blocks until a writer
// comes, and a signal must not wait for that. A file opened after ctx ended is closed.
func openContext(ctx context.Context, name string) (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	c := make(chan opened, 1)
	go func() {
		f, err := os.Open(name)
		c <- opened{f, err}
	}()
	select {
	case o := <-c:
		return o.f, o.err
	case <-ctx.Done():
		go func() {
			if o := <-c; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/nodelabels"
	"warmd.io/warmd/pkg/nvml"
	"warmd.io/warmd/pkg/nvml/gonvml"
	"warmd.io/warmd/pkg/status"
)

type gpuOptions struct {
	output    string
	gfdLabels bool
	// detector and now are seams for tests; nil means the real NVML backend and time.Now.
	detector nvml.Detector
	now      func() time.Time
}

// gpuReport is what `warmd gpu -o json|yaml` prints.
type gpuReport struct {
	Inventory nvml.Inventory    `json:"inventory"`
	Labels    nodelabels.Labels `json:"labels"`
	Cacheable bool              `json:"cacheable"`
	Error     string            `json:"error,omitempty"`
}

func newGPUCommand(s IOStreams) *cobra.Command {
	return newGPUCommandWith(s, gpuOptions{})
}

func newGPUCommandWith(s IOStreams, o gpuOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "Show this node's GPUs, their SKU key and identity labels",
		Long: `Read the node's NVIDIA GPUs through NVML (libnvidia-ml.so.1) and print the inventory, the SKU key
that compile caches are keyed by, and the identity labels warmd publishes. It does not need the daemon.
On a node without an NVIDIA GPU or NVML it says so and exits 0 (SKU key "none"). When an NVML call
fails it prints what it could read, lists the failed calls, and exits 1.`,
		Example: `  warmd gpu
  warmd gpu -o json | jq -r .inventory.sku
  warmd gpu --gfd-labels     # also show the nvidia.com/* names (config gpu.gfdLabels)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := CheckFormat(o.output, "table", "json", "yaml"); err != nil {
				return err
			}
			det, now := o.detector, o.now
			if det == nil {
				det = nvml.DetectorFromEnv(gonvml.New())
			}
			if now == nil {
				now = time.Now
			}
			inv, derr := det.Detect(cmd.Context())
			st := nvml.NewStatus(inv, derr, nvml.LabelOptions{GFD: o.gfdLabels}, now())
			st.Detected = time.Time{} // a one-shot reading: no "detected … ago"
			var err error
			if o.output == "table" {
				err = status.WriteGPU(s.Out, st, now())
			} else {
				err = PrintObject(s.Out, o.output, gpuReport{Inventory: inv, Labels: st.Labels, Cacheable: st.Cacheable, Error: st.LastError})
			}
			if err != nil {
				return err
			}
			if derr != nil {
				return &ExitError{Code: 1, Err: fmt.Errorf("GPU detection incomplete: %w", derr)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.BoolVar(&o.gfdLabels, "gfd-labels", false, "also show GPU Feature Discovery's nvidia.com/* label names")
	return cmd
}

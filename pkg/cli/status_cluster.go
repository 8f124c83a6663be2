package cli

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/kubeconfig"
	"warmd.io/warmd/pkg/status"
)

// clusterStatusOptions are `warmd status --cluster`'s flags.
type clusterStatusOptions struct {
	enabled    bool
	kubeconfig string
	model      string
	sku        string
}

func addClusterStatusFlags(f *pflag.FlagSet, o *clusterStatusOptions) {
	f.BoolVar(&o.enabled, "cluster", false, "show every Node × model from the API server (labels and predictions warmd published) instead of this node's daemon")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "with --cluster: kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	f.StringVar(&o.model, "model", "", "with --cluster: only this model (id or label-key name)")
	f.StringVar(&o.sku, "sku", "", "with --cluster: only Nodes of this GPU SKU (warmd.io/gpu.sku)")
}

// runStatusCluster lists Nodes and prints the cluster view: for each model, the Nodes fastest first.
func runStatusCluster(ctx context.Context, s IOStreams, output string, o clusterStatusOptions) error {
	if err := CheckFormat(output, "table", "wide", "json", "yaml"); err != nil {
		return err
	}
	rc, err := kubeconfig.ForCommand(o.kubeconfig)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	cs, err := kube.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	// Nodes warmd never labelled have no rows; the SKU label narrows the list server-side.
	opts := metav1.ListOptions{}
	if o.sku != "" {
		opts.LabelSelector = "warmd.io/gpu.sku=" + o.sku
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, opts)
	if err != nil {
		return &ExitError{Code: 3, Err: fmt.Errorf("list Nodes: %w (check --kubeconfig and that you may list nodes)", err)}
	}
	rows := status.ClusterRows(nodes.Items, status.ClusterFilter{Model: o.model, SKU: o.sku})
	switch output {
	case "json", "yaml":
		if rows == nil {
			rows = []status.ClusterRow{}
		}
		return PrintObject(s.Out, output, rows)
	}
	return status.RenderCluster(s.Out, rows, output == "wide")
}

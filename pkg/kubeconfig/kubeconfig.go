// Package kubeconfig is warmd's one way to find the API server. Two callers want two defaults, and
// both are spelled here so they cannot drift: the node daemon (readiness.kubeconfig) runs as root on
// every node and must never pick up whatever cluster root's ~/.kube/config or $KUBECONFIG happens to
// name, so an empty path means the pod's own service account; the commands an operator runs
// (`warmd extender`, `warmd status --cluster`) find their config as kubectl does.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ForDaemon loads the kubeconfig at path, or the in-cluster config when path is empty. fix is the
// setting that chose path, named in the error (readiness.kubeconfig).
func ForDaemon(path, fix string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster API config: %w (outside a pod, set %s)", err, fix)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w (fix %s)", path, err, fix)
	}
	return c, nil
}

// ForCommand loads a kubeconfig the way kubectl does: an explicit path, else $KUBECONFIG or
// ~/.kube/config, else the in-cluster config.
func ForCommand(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w (pass --kubeconfig FILE, set KUBECONFIG, or run in a pod)", err)
	}
	return c, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"warmd.io/warmd/pkg/cli"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/metrics"
)

type extenderOptions struct {
	kubeconfig   string
	serve        config.Extender
	filterFailed bool
	replicas     bool
	fresh        time.Duration
	resync       time.Duration
	logFormat    string
	logLevel     string
	grace        time.Duration
	leaderElect  bool
	leaseNS      string
	leaseName    string
}

func newExtenderCommand(s cli.IOStreams) *cobra.Command {
	o := extenderOptions{}
	cmd := &cobra.Command{
		Use:   "extender",
		Short: "Run the kube-scheduler extender that prefers the Node a vLLM pod will be ready on soonest",
		Long: `Run warmd's kube-scheduler extender (a Deployment, see manifests/extender/). It watches Nodes and
answers the scheduler's POST /filter and /prioritize (nodeCacheCapable or not): a pod that names its
model (annotation warmd.io/model, or a vLLM container's --model / "vllm serve MODEL") gets each Node
scored 0–10 by the predicted time-to-ready warmd published there (warmd.io/predicted-ready; fastest =
10), and with --filter-failed the Nodes where that model failed are filtered out. Pods without a model
get neutral scores. The same listener serves /metrics (warmd_warm_nodes{model},
warmd_cluster_fastest_ready_seconds{model}, and with --track-replicas warmd_vllm_ready_replicas{model}
and warmd_vllm_fresh_replicas{model}), /healthz and /readyz (ready once Nodes and Pods are listed).`,
		Example: `  # in the cluster (in-cluster config)
  warmd extender --listen :8888 --filter-failed

  # from a workstation against a test cluster
  warmd extender --kubeconfig ~/.kube/config --listen 127.0.0.1:8888 --log-format text`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runExtender(cmd.Context(), s, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	f.StringVar(&o.serve.Listen, "listen", config.DefaultExtenderListen, "address for the extender API, /metrics, /healthz and /readyz")
	f.Int64Var(&o.serve.MaxBodyBytes, "max-body-bytes", config.DefaultExtenderMaxBodyBytes, "largest request body served; larger is refused with 413 (6 MiB: 10,000 Node names and the largest Pod)")
	f.IntVar(&o.serve.MaxInFlight, "max-in-flight", config.DefaultExtenderMaxInFlight, "scheduler requests served at once; one more is refused with 503")
	f.IntVar(&o.serve.MaxNodes, "max-nodes", config.DefaultExtenderMaxNodes, "candidate Nodes one request may name; more are refused with 413")
	f.DurationVar(&o.serve.RequestTimeout, "request-timeout", config.DefaultExtenderTimeout, "longest a request may take to arrive (read timeout; the write timeout is twice it)")
	f.BoolVar(&o.filterFailed, "filter-failed", false, "filter out Nodes where the pod's model is failed (models.warmd.io/<model>=failed)")
	f.BoolVar(&o.replicas, "track-replicas", true, "watch Pods and export warmd_vllm_ready_replicas / warmd_vllm_fresh_replicas per model (needs pods list/watch)")
	f.DurationVar(&o.fresh, "fresh-window", extender.DefaultFresh, "a replica ready for less than this counts as fresh (its prefix cache is still empty)")
	f.DurationVar(&o.resync, "resync", 10*time.Minute, "informer resync period (0 disables)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "how long shutdown may take")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "of several replicas, only the Lease holder exports the cluster-wide series (so sum() counts each Node once); all answer the scheduler")
	f.StringVar(&o.leaseNS, "leader-elect-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease (default $POD_NAMESPACE)")
	f.StringVar(&o.leaseName, "leader-elect-lease", "warmd-extender", "name of the Lease")
	return cmd
}

// kubeRESTConfig loads a kubeconfig the way kubectl does: an explicit path, else $KUBECONFIG or
// ~/.kube/config, else the in-cluster config.
func kubeRESTConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w (pass --kubeconfig FILE, set KUBECONFIG, or run in a pod)", err)
	}
	return c, nil
}

func runExtender(ctx context.Context, s cli.IOStreams, o extenderOptions) error {
	log, err := newLogger(s, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	o.serve.Default()
	if err := o.serve.Validate(); err != nil {
		return &cli.ExitError{Code: 2, Err: err}
	}
	rc, err := kubeRESTConfig(o.kubeconfig)
	if err != nil {
		return &cli.ExitError{Code: 2, Err: err}
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	ln, err := net.Listen("tcp", o.serve.Listen)
	if err != nil {
		return &cli.ExitError{Code: 2, Err: fmt.Errorf("listen %s: %w (pick a free --listen address)", o.serve.Listen, err)}
	}
	reg := metrics.NewRegistry()
	ix := extender.NewIndex()
	var replicas metrics.ReplicaView // stays a nil interface unless tracking is on
	rep := extender.NewReplicas(o.fresh, nil)
	if o.replicas {
		replicas = rep
	}
	em := metrics.NewExtender(reg, ix, replicas)
	leader := extender.NewLeader(o.leaderElect)
	em.SetLeader(leader.IsLeader)
	x := extender.New(extender.Config{FilterFailed: o.filterFailed, MaxBodyBytes: o.serve.MaxBodyBytes,
		MaxInFlight: o.serve.MaxInFlight, MaxNodes: o.serve.MaxNodes}, ix, em, log)
	if o.replicas {
		x.TrackReplicas(rep)
	}
	mux := http.NewServeMux()
	mux.Handle("/", x.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// Every connection is bounded in time: headers in 5s (or the request timeout if shorter), the
	// whole request in --request-timeout, the answer in twice it, an idle keep-alive in 90s.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: min(5*time.Second, o.serve.RequestTimeout),
		ReadTimeout: o.serve.RequestTimeout, WriteTimeout: 2 * o.serve.RequestTimeout,
		IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return x.Run(gctx, cs, o.resync) })
	g.Go(func() error {
		id := os.Getenv("POD_NAME")
		if id == "" {
			id, _ = os.Hostname()
		}
		return leader.Run(gctx, cs, extender.LeaseOptions{Namespace: o.leaseNS, Name: o.leaseName, Identity: id}, log)
	})
	g.Go(func() error {
		log.Info("extender listening", "addr", ln.Addr().String(), "filterFailed", o.filterFailed)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve %s: %w", o.serve.Listen, err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), o.grace)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}

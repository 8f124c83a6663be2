package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/extender"
	"warmd.io/warmd/pkg/kube"
	"warmd.io/warmd/pkg/kubeconfig"
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

func newExtenderCommand(s IOStreams) *cobra.Command {
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
	f.StringVar(&o.serve.TLSCertFile, "tls-cert-file", "", "PEM server certificate: serve the scheduler API over TLS (reloaded when the file changes)")
	f.StringVar(&o.serve.TLSKeyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	f.StringVar(&o.serve.ClientCAFile, "client-ca-file", "", "PEM CA bundle that signs the scheduler's client certificate; connections without one are refused (needs --metrics-listen)")
	f.StringVar(&o.serve.MetricsListen, "metrics-listen", "", "plain-HTTP address for /metrics, /healthz and /readyz only (default: all on --listen)")
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

func runExtender(ctx context.Context, s IOStreams, o extenderOptions) error {
	log, err := newLogger(s, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	o.serve.Default()
	if err := o.serve.Validate(); err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	rc, err := kubeconfig.ForCommand(o.kubeconfig)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kube.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	ln, err := net.Listen("tcp", o.serve.Listen)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("listen %s: %w (pick a free --listen address)", o.serve.Listen, err)}
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
	// The scheduler API on --listen (TLS with --tls-cert-file); /metrics and the probes there too, or
	// on their own plain listener with --metrics-listen (they carry no client certificate).
	metricsH := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.Handle("/", x.Handler())
	servers := []*extender.Endpoint{{Flag: "--listen", Listener: ln, Server: extender.NewServer(mux, o.serve.RequestTimeout)}}
	if o.serve.MetricsListen == "" {
		mux.Handle("GET /metrics", metricsH)
	} else {
		mln, err := net.Listen("tcp", o.serve.MetricsListen)
		if err != nil {
			return &ExitError{Code: 2, Err: fmt.Errorf("listen %s: %w (pick a free --metrics-listen address)", o.serve.MetricsListen, err)}
		}
		pm := http.NewServeMux()
		pm.Handle("/", x.ProbeHandler())
		pm.Handle("GET /metrics", metricsH)
		servers = append(servers, &extender.Endpoint{Flag: "--metrics-listen", Listener: mln, Server: extender.NewServer(pm, o.serve.RequestTimeout)})
	}
	if o.serve.TLSCertFile != "" {
		tc, err := extender.ServerTLS(extender.TLSFiles{Cert: o.serve.TLSCertFile, Key: o.serve.TLSKeyFile, ClientCA: o.serve.ClientCAFile}, log)
		if err != nil {
			return &ExitError{Code: 2, Err: err}
		}
		servers[0].Server.TLSConfig, servers[0].TLS = tc, true
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return x.Run(gctx, cs, o.resync) })
	g.Go(func() error {
		id := os.Getenv("POD_NAME")
		if id == "" {
			id, _ = os.Hostname()
		}
		return leader.Run(gctx, cs, extender.LeaseOptions{Namespace: o.leaseNS, Name: o.leaseName, Identity: id}, log)
	})
	for _, e := range servers {
		g.Go(func() error {
			log.Info("extender listening", "flag", e.Flag, "addr", e.Listener.Addr().String(), "tls", e.TLS,
				"clientCerts", e.TLS && o.serve.ClientCAFile != "", "filterFailed", o.filterFailed)
			return e.Serve()
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), o.grace)
			defer cancel()
			return e.Server.Shutdown(sctx)
		})
	}
	return g.Wait()
}

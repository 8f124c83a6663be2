package cli

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"warmd.io/warmd/pkg/assemble"
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/daemon"
	"warmd.io/warmd/pkg/metrics"
	"warmd.io/warmd/pkg/state"
)

// The range of --grace: under a second the parts cannot stop cleanly, and over ten minutes is longer
// than any pod's terminationGracePeriodSeconds should be.
const (
	minGrace = time.Second
	maxGrace = 10 * time.Minute
)

type runOptions struct {
	configPath string
	logFormat  string
	logLevel   string
	grace      time.Duration
}

func newRunCommand(s IOStreams) *cobra.Command {
	o := runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node daemon",
		Long: `Run the node daemon: keep this node's models, images and compile caches warm, measure vLLM starts,
publish warm state on the Node, and serve the local API (<dataDir>/warmd.sock) and /metrics, /healthz,
/readyz (default :9400). The config file is reloaded when it changes; an invalid edit is rejected and
the previous config keeps running. SIGTERM or SIGINT stops it within --grace.`,
		Example: `  # on a node, as the DaemonSet does
  warmd run --config /etc/warmd/config.yaml

  # human-readable logs while trying it out
  warmd run --config ./warmd.yaml --log-format text`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDaemon(cmd, s, o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.configPath, "config", "c", "/etc/warmd/config.yaml", "NodeConfig file (YAML)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.DurationVar(&o.grace, "grace", 20*time.Second, "how long shutdown may take (1s..10m)")
	return cmd
}

func newLogger(s IOStreams, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, &ExitError{Code: 2, Err: fmt.Errorf("--log-level %q: use debug, info, warn or error", level)}
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(s.ErrOut, ho)), nil
	case "text":
		return slog.New(slog.NewTextHandler(s.ErrOut, ho)), nil
	}
	return nil, &ExitError{Code: 2, Err: fmt.Errorf("--log-format %q: use json or text", format)}
}

func runDaemon(cmd *cobra.Command, s IOStreams, o runOptions) error {
	log, err := newLogger(s, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if o.grace < minGrace || o.grace > maxGrace {
		return &ExitError{Code: 2, Err: fmt.Errorf("--grace %s is outside %s..%s: shutdown needs a moment to stop the parts, "+
			"and the kubelet kills the pod after terminationGracePeriodSeconds anyway", o.grace, minGrace, maxGrace)}
	}
	data, err := config.Read(o.configPath)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("%w (pass --config FILE)", err)}
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return &ExitError{Code: 2, Err: fmt.Errorf("%s: %w", o.configPath, err)}
	}
	log.Info("effective config", "file", o.configPath, "config", cfg)
	reg := metrics.NewRegistry()
	m := metrics.New(reg)
	store := state.New(time.Now)
	return daemon.Run(cmd.Context(), daemon.Options{
		ConfigPath: o.configPath, ConfigData: data, Config: cfg, Grace: o.grace, Assemble: assemble.Parts,
	}, store, m, reg, log)
}

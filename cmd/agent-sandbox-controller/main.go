// Command agent-sandbox-controller runs the Sandbox controller and, with
// --extensions, the SandboxTemplate, SandboxWarmPool and SandboxClaim
// controllers.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/agent-sandbox/agent-sandbox/internal/controller/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/manager"
	"github.com/agent-sandbox/agent-sandbox/internal/metrics"
)

// Build information, set with -ldflags "-X main.version=... -X main.gitCommit=... -X main.buildDate=...".
var (
	version   = "dev"
	gitCommit = "unknown"
	buildDate = "unknown"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "agent-sandbox-controller: %v\n", err)
		os.Exit(1)
	}
}

type flags struct {
	showVersion             bool
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	extensions              bool
	clusterDomain           string
	kubeAPIQPS              float64
	kubeAPIBurst            int
	sandboxWorkers          int
	statusCoalesceWindow    time.Duration
	cacheLabelSelectors     bool
}

func parseFlags(args []string) (*flags, *zap.Options, error) {
	fs := flag.NewFlagSet("agent-sandbox-controller", flag.ContinueOnError)
	f := &flags{}
	fs.BoolVar(&f.showVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader through a Lease so only one replica reconciles.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (auto-detected when empty).")
	fs.BoolVar(&f.extensions, "extensions", false, "Also run the SandboxTemplate, SandboxWarmPool and SandboxClaim controllers.")
	fs.StringVar(&f.clusterDomain, "cluster-domain", "cluster.local", "Cluster DNS domain used in status.serviceFQDN.")
	fs.Float64Var(&f.kubeAPIQPS, "kube-api-qps", -1, "Client-side QPS limit towards the apiserver; <= 0 disables it.")
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 10, "Client-side burst towards the apiserver; must be > 0.")
	fs.IntVar(&f.sandboxWorkers, "sandbox-concurrent-workers", 100, "Concurrent Sandbox reconciles; must be > 0.")
	fs.DurationVar(&f.statusCoalesceWindow, "sandbox-status-coalesce-window", time.Second,
		"Delay for Sandbox status writes that only refine a not-ready state; 0 writes every change at once.")
	fs.BoolVar(&f.cacheLabelSelectors, "cache-label-selectors", false, "Cache only Pods and Services that carry the sandbox tracking label.")
	zopts := &zap.Options{}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	switch {
	case f.kubeAPIBurst <= 0:
		return nil, nil, fmt.Errorf("--kube-api-burst must be > 0, got %d", f.kubeAPIBurst)
	case f.sandboxWorkers <= 0:
		return nil, nil, fmt.Errorf("--sandbox-concurrent-workers must be > 0, got %d", f.sandboxWorkers)
	case f.statusCoalesceWindow < 0:
		return nil, nil, fmt.Errorf("--sandbox-status-coalesce-window must be >= 0, got %s", f.statusCoalesceWindow)
	}
	return f, zopts, nil
}

func run(args []string) error {
	f, zopts, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if f.showVersion {
		fmt.Println(version)
		return nil
	}
	// pprof and friends must never be exposed by accident.
	http.DefaultServeMux = http.NewServeMux()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(zopts)))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS = float32(f.kubeAPIQPS)
	cfg.Burst = f.kubeAPIBurst
	mgr, err := manager.New(cfg, manager.Options{
		MetricsBindAddress:      f.metricsAddr,
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElect:             f.leaderElect,
		LeaderElectionNamespace: f.leaderElectionNamespace,
		CacheLabelSelectors:     f.cacheLabelSelectors,
	})
	if err != nil {
		return err
	}
	if err := sandbox.SetupWithManager(mgr, sandbox.Options{
		ClusterDomain:        f.clusterDomain,
		Workers:              f.sandboxWorkers,
		StatusCoalesceWindow: f.statusCoalesceWindow,
	}); err != nil {
		return fmt.Errorf("setting up sandbox controller: %w", err)
	}
	if err := metrics.RegisterSandboxMetrics(mgr.GetCache(), metrics.BuildInfo{GitVersion: version, GitCommit: gitCommit, BuildDate: buildDate}); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if f.extensions {
		return errors.New("--extensions: the extensions controllers are not built into this binary yet")
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

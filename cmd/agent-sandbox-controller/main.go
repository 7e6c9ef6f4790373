// Command agent-sandbox-controller runs the Sandbox controller and, with
// --extensions, the SandboxTemplate, SandboxWarmPool and SandboxClaim
// controllers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"sigs.k8s.io/agent-sandbox/internal/apiwait"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions"
	"sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/metrics"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
	"sigs.k8s.io/agent-sandbox/internal/transport"
	"sigs.k8s.io/agent-sandbox/internal/webhook"
)

// Build information, set with -ldflags "-X main.version=... -X main.gitCommit=... -X main.buildDate=...".
var (
	version   = "dev"
	gitCommit = "unknown"
	buildDate = "unknown"
)

func main() {
	err := run(os.Args[1:])
	if lost := (*lostLeadershipError)(nil); errors.As(err, &lost) {
		ctrl.Log.Info("leader lease lost while running; starting again in place instead of exiting into the kubelet's restart backoff", "reason", lost.err.Error())
		if rerr := restartInPlace(lost.stopping); rerr != nil {
			err = fmt.Errorf("%w (not restarted in place: %w)", err, rerr)
		}
	}
	if err != nil {
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
	leaderElectionIdentity  string
	restartInPlace          bool
	extensions              bool
	clusterDomain           string
	kubeAPIQPS              float64
	kubeAPIBurst            int
	sandboxWorkers          int
	statusCoalesceWindow    time.Duration
	writeBehindWindow       time.Duration
	deepHibernation         bool
	checkpointTimeout       time.Duration
	cacheLabelSelectors     bool
	transport               transport.Options
	pprof                   manager.PProf
	enableTracing           bool

	ext extensions.Options
	// lateBindingKeyFile: see --late-binding-key-file.
	lateBindingKeyFile string
	// manageLateBindingKey: see --manage-late-binding-key.
	manageLateBindingKey bool

	webhook webhook.Options
	// serveV1alpha1: see --serve-v1alpha1; nil leaves the CRDs as they are.
	serveV1alpha1 *bool
}

func parseFlags(args []string) (*flags, *zap.Options, error) {
	fs := flag.NewFlagSet("agent-sandbox-controller", flag.ContinueOnError)
	f := &flags{}
	fs.BoolVar(&f.showVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Elect a leader through a Lease so only one replica reconciles.")
	fs.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (auto-detected when empty).")
	fs.StringVar(&f.leaderElectionIdentity, "leader-election-identity", "",
		"Identity the Lease is held under, unique to this Pod: the manifests pass $(POD_NAME)_$(POD_UID) from the downward API, so a restarted container leads again at once instead of waiting out its dead predecessor's lease (15 s). Empty: <hostname>_<random UUID>.")
	fs.BoolVar(&f.restartInPlace, "leader-election-restart-in-place", true,
		"When this replica loses its leader lease while running (e.g. the API server was unreachable past the 10 s renew deadline), stop every controller and start the binary again in the same process (exec) instead of exiting, so the kubelet's crash-loop backoff, which doubles with every restart, does not hold up the next leadership. false: exit, as controller-runtime does.")
	fs.BoolVar(&f.extensions, "extensions", false, "Also run the SandboxTemplate, SandboxWarmPool and SandboxClaim controllers.")
	fs.StringVar(&f.clusterDomain, "cluster-domain", "cluster.local", "Cluster DNS domain used in status.serviceFQDN.")
	fs.Float64Var(&f.kubeAPIQPS, "kube-api-qps", -1, "Client-side QPS limit towards the apiserver; <= 0 disables it.")
	fs.IntVar(&f.kubeAPIBurst, "kube-api-burst", 10, "Client-side burst towards the apiserver; must be > 0.")
	fs.IntVar(&f.sandboxWorkers, "sandbox-concurrent-workers", 100, "Concurrent Sandbox reconciles; must be > 0.")
	fs.BoolVar(&f.deepHibernation, "deep-hibernation", false,
		"Checkpoint gVisor Sandboxes' memory on suspend and restore it on resume (needs the node agent sandbox-hibernate-agent and the hibernation shim; an agent-sandbox extension).")
	fs.DurationVar(&f.checkpointTimeout, "checkpoint-timeout", sandbox.DefaultCheckpointTimeout,
		"With --deep-hibernation: how long a suspend waits for the node agent's checkpoint before suspending with volumes only.")
	fs.DurationVar(&f.writeBehindWindow, "sandbox-write-behind-window", 0,
		"Hold back the metadata patch of an already-owned Pod (e.g. the relabel after a claim adopts a warm Sandbox) by up to min(this, 1s); 0 writes at once.")
	fs.DurationVar(&f.statusCoalesceWindow, "sandbox-status-coalesce-window", time.Second,
		"Delay for Sandbox status writes that only refine a not-ready state; 0 writes every change at once.")
	fs.IntVar(&f.transport.Connections, "api-connections", 1, "HTTP/2 connections to the apiserver that non-watch requests are spread over; must be >= 1.")
	fs.BoolVar(&f.transport.SeparateWatch, "separate-watch-connection", false, "Give the informers' list/watch requests a connection of their own.")
	fs.BoolVar(&f.enableTracing, "enable-tracing", false, "Export traces of reconciles over OTLP/gRPC (configured by OTEL_EXPORTER_OTLP_ENDPOINT and friends); the controller exits if the exporter cannot start.")
	fs.BoolVar(&f.pprof.Enabled, "enable-pprof", false, "Serve /debug/pprof/profile on the metrics server.")
	fs.BoolVar(&f.pprof.Debug, "enable-pprof-debug", false, "Serve every pprof endpoint and /debug/fgprof on the metrics server, with block and mutex profiling; implies --enable-pprof.")
	fs.IntVar(&f.pprof.BlockProfileRate, "pprof-block-profile-rate", 1000000, "Block profile rate with --enable-pprof-debug (runtime.SetBlockProfileRate); negative means 0.")
	fs.IntVar(&f.pprof.MutexProfileFraction, "pprof-mutex-profile-fraction", 10, "Mutex profile fraction with --enable-pprof-debug (runtime.SetMutexProfileFraction); negative means 0.")
	fs.BoolVar(&f.cacheLabelSelectors, "cache-label-selectors", false, "Cache only Pods and Services that carry the sandbox tracking label.")
	e := &f.ext
	fs.IntVar(&e.ClaimWorkers, "sandbox-claim-concurrent-workers", 50, "Concurrent SandboxClaim reconciles; must be > 0.")
	fs.IntVar(&e.WarmPoolWorkers, "sandbox-warm-pool-concurrent-workers", 1, "Concurrent SandboxWarmPool reconciles; must be > 0.")
	fs.IntVar(&e.TemplateWorkers, "sandbox-template-concurrent-workers", 1, "Concurrent SandboxTemplate reconciles.")
	fs.IntVar(&e.WarmPoolMaxBatchSize, "sandbox-warm-pool-max-batch-size", 300, "Most Sandboxes a pool creates or deletes per reconcile; must be > 0.")
	fs.DurationVar(&e.ReplenishDelay, "sandbox-warm-pool-replenish-delay", 0, "Hold refills this long after the pool shrinks; 0 refills at once.")
	fs.Float64Var(&e.MaxRefillRate, "sandbox-warm-pool-max-refill-rate", 0, "Most Sandboxes per second a pool creates; 0 is unlimited.")
	fs.DurationVar(&e.ClaimWarmWait, "sandbox-claim-warm-wait", claim.DefaultWarmWait, "Longest a claim waits for a warm pool member that is starting (instead of starting a cold Sandbox); members starting for longer do not count; must be > 0.")
	fs.DurationVar(&e.ReadinessGracePeriod, "sandbox-warm-pool-readiness-grace-period", 5*time.Minute, "How long a pool Sandbox may stay not Ready before it is replaced; must be > 0.")
	fs.DurationVar(&e.UnschedulableRecheckInterval, "sandbox-warm-pool-unschedulable-recheck-interval", time.Minute, "How often a pool holding unschedulable Sandboxes re-checks them; must be > 0.")
	fs.BoolVar(&e.EnableWarmPoolEviction, "enable-warm-pool-eviction", true, "Mark warm pool pods safe to evict for the cluster autoscaler.")
	fs.BoolVar(&e.DisableClaimEvents, "disable-claim-events", false, "Emit no claim events at all, not even failures.")
	fs.BoolVar(&e.ClaimSuccessEvents, "claim-success-events", false, "Also emit SandboxAdopted/SandboxProvisioned events (one extra write per claim).")
	fs.BoolVar(&e.DisableClaimObservabilityAnnotations, "disable-claim-observability-annotations", false, "Never write first-observed/first-ready annotations on claims.")
	fs.BoolVar(&e.PersistClaimObservabilityAnnotations, "persist-claim-observability-annotations", false, "Write first-observed/first-ready annotations on claims (extra writes); by default they live in memory for the metrics.")
	fs.BoolVar(&e.ReferenceCompatibleWrites, "reference-compatible-writes", false,
		"Make every claim write the published controller makes by default (first-observed/first-ready and sandbox-name annotations, SandboxAdopted/SandboxProvisioned events); --disable-claim-observability-annotations and --disable-claim-events still apply.")
	fs.StringVar(&f.lateBindingKeyFile, "late-binding-key-file", "",
		"PEM Ed25519 private key (a Secret volume only this Pod mounts) that signs env deliveries to warm sandboxes; overrides --manage-late-binding-key.")
	fs.BoolVar(&f.manageLateBindingKey, "manage-late-binding-key", true,
		"Without --late-binding-key-file: keep the late-binding key in Secret "+latebind.DefaultKeySecret+" of the controller's namespace (created if missing), so claims with env stay on the warm path; pools inject its public key ("+latebind.KeyEnv+") into the first container of templates that allow env. false with no key file: claims with env cold-start.")
	// Conversion webhook (v1alpha1 <-> v1beta1), internal/webhook.
	w := &f.webhook
	fs.BoolVar(&w.Enable, "enable-webhook", true, "Serve the v1alpha1 <-> v1beta1 conversion webhook. With false, v1alpha1 requests fail; set the CRDs' conversion strategy to None if nothing uses v1alpha1.")
	fs.IntVar(&w.Port, "webhook-port", webhook.DefaultPort, "Port the conversion webhook server listens on.")
	fs.StringVar(&w.CertDir, "webhook-cert-dir", webhook.DefaultCertDir(), "Directory of the webhook serving certificate and key.")
	fs.StringVar(&w.CertName, "webhook-cert-name", webhook.DefaultCertName, "Serving certificate file in --webhook-cert-dir (with --manage-webhook-certs=false; a combined cert.pem is used when neither default file exists).")
	fs.StringVar(&w.KeyName, "webhook-key-name", webhook.DefaultKeyName, "Serving key file in --webhook-cert-dir (with --manage-webhook-certs=false).")
	fs.StringVar(&w.ServiceName, "webhook-service-name", webhook.DefaultServiceName, "Service the apiserver reaches the webhook through (certificate names, CRD clientConfig).")
	fs.StringVar(&w.Namespace, "webhook-namespace", webhook.DefaultNamespace, "Namespace of the webhook Service and of the certificate Secret.")
	fs.Var(optionalBool{&f.serveV1alpha1}, "serve-v1alpha1",
		"Whether the four CRDs serve the deprecated v1alpha1: the controller (the leader) sets their served flag and keeps it set. While v1alpha1 is served the apiserver calls the conversion webhook once for every write of a Sandbox, claim, template or pool, even when no client uses v1alpha1; false saves those calls on a cluster whose clients all speak v1beta1 (v1alpha1 requests then get 404). Unset: the CRDs are left as installed.")
	fs.BoolVar(&w.ManageCerts, "manage-webhook-certs", true, "Keep a self-signed CA and serving certificate in Secret agent-sandbox-webhook-certs, renew them before expiry and patch the CA into the CRDs; false expects provisioned files and patched CRDs.")
	zopts := &zap.Options{}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	switch {
	case f.webhook.Validate() != nil:
		return nil, nil, f.webhook.Validate()
	case f.transport.Validate() != nil:
		return nil, nil, f.transport.Validate()
	case manager.ValidateLeaderIdentity(f.leaderElectionIdentity) != nil:
		return nil, nil, fmt.Errorf("--leader-election-identity: %w", manager.ValidateLeaderIdentity(f.leaderElectionIdentity))
	case f.kubeAPIBurst <= 0:
		return nil, nil, fmt.Errorf("--kube-api-burst must be > 0, got %d", f.kubeAPIBurst)
	case f.sandboxWorkers <= 0:
		return nil, nil, fmt.Errorf("--sandbox-concurrent-workers must be > 0, got %d", f.sandboxWorkers)
	case f.writeBehindWindow < 0:
		return nil, nil, fmt.Errorf("--sandbox-write-behind-window must be >= 0, got %s", f.writeBehindWindow)
	case f.statusCoalesceWindow < 0:
		return nil, nil, fmt.Errorf("--sandbox-status-coalesce-window must be >= 0, got %s", f.statusCoalesceWindow)
	case f.ext.ClaimWorkers <= 0 || f.ext.WarmPoolWorkers <= 0:
		return nil, nil, errors.New("--sandbox-claim-concurrent-workers and --sandbox-warm-pool-concurrent-workers must be > 0")
	case f.ext.WarmPoolMaxBatchSize <= 0:
		return nil, nil, fmt.Errorf("--sandbox-warm-pool-max-batch-size must be > 0, got %d", f.ext.WarmPoolMaxBatchSize)
	case f.ext.MaxRefillRate < 0 || math.IsInf(f.ext.MaxRefillRate, 0) || math.IsNaN(f.ext.MaxRefillRate):
		return nil, nil, fmt.Errorf("--sandbox-warm-pool-max-refill-rate must be finite and >= 0, got %v", f.ext.MaxRefillRate)
	case f.ext.ReadinessGracePeriod <= 0 || f.ext.UnschedulableRecheckInterval <= 0:
		return nil, nil, errors.New("--sandbox-warm-pool-readiness-grace-period and --sandbox-warm-pool-unschedulable-recheck-interval must be > 0")
	case f.ext.ClaimWarmWait <= 0:
		return nil, nil, fmt.Errorf("--sandbox-claim-warm-wait must be > 0, got %s", f.ext.ClaimWarmWait)
	case f.ext.ReplenishDelay < 0:
		return nil, nil, fmt.Errorf("--sandbox-warm-pool-replenish-delay must be >= 0, got %s", f.ext.ReplenishDelay)
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

	if f.enableTracing {
		shutdown, err := tracing.Setup(context.Background())
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				ctrl.Log.Error(err, "flushing traces")
			}
		}()
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS = float32(f.kubeAPIQPS)
	cfg.Burst = f.kubeAPIBurst
	ctx := ctrl.SetupSignalHandler()
	restarts := restartsInPlace()
	if restarts > 0 {
		ctrl.Log.Info("started in place after losing the leader lease", "restartsInPlace", restarts)
	}
	// Everything below reads the API server before the manager runs; a
	// restart during an API server outage waits here rather than exiting
	// into the kubelet's crash-loop backoff.
	if err := apiwait.Wait(ctx, cfg, apiwait.Options{
		ProbeAddr: f.probeAddr, Log: ctrl.Log.WithName("startup"),
	}); err != nil {
		return err
	}
	f.webhook.ClusterDomain = f.clusterDomain
	var (
		certs         *webhook.CertManager
		webhookServer ctrlwebhook.Server
	)
	if f.webhook.Enable {
		if f.webhook.ManageCerts {
			scheme, err := manager.NewScheme()
			if err != nil {
				return err
			}
			if certs, err = webhook.NewCertManager(cfg, scheme, f.webhook); err != nil {
				return err
			}
		}
		webhookServer = webhook.NewServer(f.webhook, certs)
	}
	mgr, err := manager.New(cfg, manager.Options{
		WebhookServer:           webhookServer,
		MetricsBindAddress:      f.metricsAddr,
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElect:             f.leaderElect,
		LeaderElectionNamespace: f.leaderElectionNamespace,
		LeaderElectionIdentity:  f.leaderElectionIdentity,
		CacheLabelSelectors:     f.cacheLabelSelectors,
		Transport:               f.transport,
		PProf:                   f.pprof,
	})
	if err != nil {
		return err
	}
	if err := sandbox.SetupWithManager(mgr, sandbox.Options{
		ClusterDomain:        f.clusterDomain,
		Workers:              f.sandboxWorkers,
		StatusCoalesceWindow: f.statusCoalesceWindow,
		WriteBehindWindow:    f.writeBehindWindow,
		DeepHibernation:      f.deepHibernation,
		CheckpointTimeout:    f.checkpointTimeout,
	}); err != nil {
		return fmt.Errorf("setting up sandbox controller: %w", err)
	}
	if err := metrics.RegisterSandboxMetrics(mgr.GetCache(), metrics.BuildInfo{GitVersion: version, GitCommit: gitCommit, BuildDate: buildDate}); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if err := metrics.RegisterRestartsInPlace(restarts); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	if f.extensions {
		domains, err := claim.ReadAllowedLabelDomains(claim.AllowedLabelDomainsFile)
		if err != nil {
			return fmt.Errorf("reading allowed label domains: %w", err)
		}
		f.ext.AllowedLabelDomains = domains
		signer, err := lateBindingSigner(ctx, cfg, f)
		switch {
		case err != nil && f.lateBindingKeyFile != "":
			return err // an explicit key that cannot be used is a setup error
		case err != nil:
			// The managed key is a default the published controller does
			// not have: an install without its RBAC (or namespace) keeps
			// working, with claims with env cold-starting as there.
			ctrl.Log.Error(err, "late binding disabled: claims with env cold-start")
		}
		f.ext.LateBinding.Signer = signer
		if err := extensions.Setup(mgr, f.ext); err != nil {
			return fmt.Errorf("setting up extension controllers: %w", err)
		}
	}
	if f.webhook.Enable {
		if err := webhook.Setup(ctx, mgr, certs); err != nil {
			return err
		}
	}
	if f.serveV1alpha1 != nil {
		// Its own uncached client: RBAC grants get and patch of the four
		// CRDs by name, not the list and watch a cache would need.
		c, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return fmt.Errorf("creating CRD client: %w", err)
		}
		if err := mgr.Add(&webhook.VersionSwitch{Client: c, Version: webhook.DeprecatedVersion, Served: *f.serveV1alpha1}); err != nil {
			return fmt.Errorf("adding the v1alpha1 switch: %w", err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		if f.leaderElect && f.restartInPlace && ctx.Err() == nil && isLeadershipLost(err) {
			return &lostLeadershipError{err: err, stopping: func() bool { return ctx.Err() != nil }}
		}
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

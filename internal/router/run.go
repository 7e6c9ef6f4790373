package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/apiwait"
)

// resumePatchTimeout bounds one resume patch call.
const resumePatchTimeout = 10 * time.Second

// Run starts the router described by cfg and blocks until ctx ends and the
// listeners have drained.
func Run(ctx context.Context, cfg *Config, log logr.Logger, bi BuildInfo) error {
	metrics := NewMetrics(bi)
	restCfg, err := loadRESTConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	// Resumes and suspends come in bursts (a fleet of agents waking up);
	// client-go's default 5 QPS would queue them behind each other.
	restCfg.QPS, restCfg.Burst = 50, 100
	// The access review below picks the router's mode and the initial LIST
	// gives up after cacheSyncTimeout: both need the API server. A router
	// started during an outage (a node restart brings both up together)
	// waits for it, its liveness probe answering, instead of guessing the
	// mode and exiting into the kubelet's backoff a minute later.
	if err := apiwait.Wait(ctx, restCfg, apiwait.Options{ProbeAddr: cfg.ProbeAddr, Log: log.WithName("startup")}); err != nil {
		return err
	}

	// Requests keep flowing while the listeners drain; the cache and the
	// resumer must outlive them, so they get their own context.
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()

	idx := NewIndex()
	control, err := NewKubeControl(restCfg)
	if err != nil {
		return err
	}
	authz, err := buildAuthorizer(cfg, restCfg)
	if err != nil {
		return err
	}
	reducedWhy, err := reducedModeReason(ctx, cfg, restCfg, log)
	if err != nil {
		return err
	}
	reduced := reducedWhy != ""
	policy := NewAddrPolicy(cfg.AllowLoopbackPodIP)
	tracker := NewIdleTracker()
	var resumer *Resumer
	if cfg.AutoResume && !reduced {
		resumer = NewResumer(bgCtx, control, metrics, resumePatchTimeout, cfg.IdleSuspendAfter > 0)
	}
	var tr *tracing
	if cfg.EnableTracing {
		if tr, err = newTracing(bgCtx); err != nil {
			return err
		}
		defer func() { _ = tr.shutdown(context.Background()) }()
	}
	if cfg.EnableOTelMetrics {
		mp, err := newOTelMetrics(bgCtx, metrics.Registry)
		if err != nil {
			return err
		}
		defer func() { _ = mp.Shutdown(context.Background()) }()
	}

	popts := ProxyOptions{
		AllowLoopback:      cfg.AllowLoopbackPodIP,
		Authorizer:         authz,
		Resolver:           idx,
		Policy:             policy,
		AlwaysAllowedPorts: cfg.DefaultSandboxPorts,
		Resumer:            resumer,
		Idle:               tracker,
		Metrics:            metrics,
		ProxyTimeout:       cfg.ProxyTimeout,
		ReadyTimeout:       cfg.ReadyTimeout,
		Unsynced:           !reduced,
		Reduced:            reduced,
		ClusterDomain:      cfg.ClusterDomain,
		Transport: TransportOptions{
			ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
			MaxRetries:            cfg.UpstreamMaxRetries,
			RetryInitialDelay:     cfg.UpstreamRetryInitialDelay,
			RetryMaxDelay:         cfg.UpstreamRetryMaxDelay,
		},
		Log: log.WithName("proxy"),
	}
	iopts := InstrumentOptions{Metrics: metrics, MaxBodyBytes: cfg.MaxRequestBodyBytes}
	if tr != nil {
		popts.Propagator, iopts.Tracer, iopts.Propagator = tr.propagator, tr.tracer, tr.propagator
	}
	if cfg.AccessLog {
		al := log.WithName("access")
		iopts.AccessLog = &al
	}
	proxy := NewProxyHandler(popts)

	sopts := ServerOptions{
		HTTPAddr: cfg.HTTPAddr, HTTPSAddr: cfg.HTTPSAddr,
		MetricsAddr: cfg.MetricsAddr, ProbeAddr: cfg.ProbeAddr,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Proxy:           proxy,
		Wrap:            func(next http.Handler) http.Handler { return Instrument(next, iopts) },
		Drain:           proxy.Drain,
		Metrics:         metrics,
		Log:             log.WithName("server"),
	}
	if cfg.HTTPSAddr != "" {
		reloader, err := NewCertReloader(cfg.TLSCertFile, cfg.TLSKeyFile, metrics, log.WithName("tls"))
		if err != nil {
			return err
		}
		if sopts.TLSConfig, err = NewTLSConfig(reloader, cfg.MTLSMode, cfg.TLSClientCAFile); err != nil {
			return err
		}
		if err := reloader.Watch(bgCtx); err != nil {
			return err
		}
	}
	srv := NewServer(sopts)
	if err := srv.Bind(); err != nil {
		return err
	}
	for _, name := range []string{ListenerHTTP, ListenerHTTPS, ListenerMetrics, ListenerProbes} {
		if a, ok := srv.Addr(name).(*net.TCPAddr); ok {
			policy.AddSelfPort(uint16(a.Port))
		}
	}
	// Serve before the initial LIST so that liveness probes answer while a
	// large cluster syncs; /readyz stays 503 and the proxy answers 503 until
	// the cache is complete.
	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serveCtx) }()
	if reduced {
		// Loud on purpose: every address now comes from the client or DNS,
		// checked only by address class.
		metrics.CacheVerification.Set(0)
		srv.SetDegraded(reducedWhy)
		srv.SetReady(true)
		log.Error(errors.New(reducedWhy), "sandbox-router serving in REDUCED MODE: cache verification is OFF; "+
			"targets come from X-Sandbox-Pod-IP (address-class checks only) or <id>.<namespace>.svc DNS; "+
			"no port, UID or ownership checks, no auto-resume, no idle suspension. "+
			"Grant get/list/watch on agents.x-k8s.io sandboxes and pods (k8s/router/rbac.yaml) for the full mode",
			"http", cfg.HTTPAddr, "authz", cfg.AuthzMode)
		return <-served
	}
	versions, err := DiscoverSandboxVersions(restCfg)
	if err != nil {
		log.Error(err, "discovering served Sandbox versions; accepting the built-in ones", "versions", DefaultSandboxAPIVersions)
	}
	if err := StartInformers(bgCtx, restCfg, idx, InformerOptions{Namespace: cfg.CacheNamespace, SandboxAPIVersions: versions}); err != nil {
		stopServe()
		return errors.Join(err, <-served)
	}
	proxy.MarkSynced()
	if cfg.IdleSuspendAfter > 0 {
		s := &IdleSuspender{Tracker: tracker, Resolver: idx, Lookup: idx, Control: control,
			Metrics: metrics, IdleAfter: cfg.IdleSuspendAfter, Log: log.WithName("idle")}
		go s.Run(bgCtx)
	}
	srv.SetReady(true)
	log.Info("sandbox-router serving", "http", cfg.HTTPAddr, "https", cfg.HTTPSAddr,
		"metrics", cfg.MetricsAddr, "probes", cfg.ProbeAddr, "authz", cfg.AuthzMode,
		"auto_resume", cfg.AutoResume, "idle_suspend_after", cfg.IdleSuspendAfter.String())
	return <-served
}

// reducedModeReason says why the router must run without its cache, or ""
// for the full mode. Missing rights are detected with
// SelfSubjectAccessReviews (which every authenticated identity may create)
// rather than by waiting for a LIST to fail: the reference's own manifest
// grants no rights on sandboxes, and a router dropped into it must serve.
func reducedModeReason(ctx context.Context, cfg *Config, restCfg *rest.Config, log logr.Logger) (string, error) {
	if !cfg.CacheEnabled {
		return "--cache-enabled=false", nil
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return "", fmt.Errorf("creating clientset: %w", err)
	}
	missing, err := missingCacheRights(ctx, cs.AuthorizationV1().SelfSubjectAccessReviews(), cfg.CacheNamespace)
	if err != nil {
		// Unknown is not "missing": go on, and let the initial LIST decide
		// (it fails startup after cacheSyncTimeout if the rights are absent).
		log.Error(err, "could not check list/watch rights; assuming the full mode")
		return "", nil
	}
	if len(missing) == 0 {
		return "", nil
	}
	why := "missing RBAC rights: " + strings.Join(missing, ", ")
	if cfg.RequireCache {
		return "", fmt.Errorf("%s (and --require-cache is set)", why)
	}
	return why, nil
}

// SelfAccessReviewer is the slice of client-go's
// SelfSubjectAccessReviewInterface used here.
type SelfAccessReviewer interface {
	Create(ctx context.Context, r *authzv1.SelfSubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SelfSubjectAccessReview, error)
}

// missingCacheRights lists the list/watch rights the informers need that
// the router's identity lacks, as "verb group/resource" strings.
func missingCacheRights(ctx context.Context, rev SelfAccessReviewer, namespace string) ([]string, error) {
	var missing []string
	for _, res := range []struct{ group, resource string }{
		{sandboxv1beta1.GroupVersion.Group, "sandboxes"}, {"", "pods"},
	} {
		for _, verb := range []string{"list", "watch"} {
			ctx, cancel := context.WithTimeout(ctx, accessReviewCallTimeout)
			out, err := rev.Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: namespace, Verb: verb,
					Group: res.group, Resource: res.resource},
			}}, metav1.CreateOptions{})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("selfsubjectaccessreview %s %s: %w", verb, res.resource, err)
			}
			if !out.Status.Allowed {
				name := res.resource
				if res.group != "" {
					name = res.group + "/" + name
				}
				missing = append(missing, verb+" "+name)
			}
		}
	}
	return missing, nil
}

// loadRESTConfig: an explicit kubeconfig wins; otherwise in-cluster; only
// "not in a cluster" falls back to the default loading rules (a broken
// in-cluster setup must not silently pick up some other cluster).
func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("loading in-cluster config: %w", err)
	}
	c, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading default kubeconfig: %w", err)
	}
	return c, nil
}

func buildAuthorizer(cfg *Config, restCfg *rest.Config) (Authorizer, error) {
	switch cfg.AuthzMode {
	case AuthzTokenReview:
		cs, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return nil, fmt.Errorf("creating clientset: %w", err)
		}
		opts := TokenReviewOptions{
			TTL: cfg.AuthzTokenReviewTTL, CacheSize: cfg.AuthzTokenReviewCacheSize,
			RequireToken: cfg.AuthzTokenReviewRequireToken, Audiences: cfg.AuthzTokenReviewAudiences,
		}
		if cfg.AuthzAccessReview {
			opts.Access = &AccessReviewOptions{
				Reviewer: cs.AuthorizationV1().SubjectAccessReviews(),
				Verb:     cfg.AuthzAccessReviewVerb,
				TTL:      cfg.AuthzAccessReviewTTL, NegativeTTL: cfg.AuthzAccessReviewNegativeTTL,
				CacheSize: cfg.AuthzAccessReviewCacheSize,
			}
		}
		return NewTokenReviewAuthorizer(cs.AuthenticationV1().TokenReviews(), opts)
	case AuthzScopedToken:
		secret, err := LoadScopedTokenSecret(cfg.AuthzScopedTokenSecretFile)
		if err != nil {
			return nil, err
		}
		return NewScopedTokenAuthorizer(secret)
	}
	return AllowAll{}, nil
}

// Package manager assembles the controller-runtime manager of
// agent-sandbox-controller: the scheme, slimmed informer caches, leader
// election, probes, metrics and the controllers. cmd/agent-sandbox-controller
// only parses flags into Options; tests build the same manager.
package manager

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	sandboxlabels "sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/scheme"
	"sigs.k8s.io/agent-sandbox/internal/transport"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch

// LeaderElectionID is the Lease name, shared with the reference so a mixed
// rollout never runs two leaders.
const LeaderElectionID = "a3317529.agent-sandbox.x-k8s.io"

// Options are the manager-level settings.
type Options struct {
	MetricsBindAddress      string
	HealthProbeBindAddress  string
	LeaderElect             bool
	LeaderElectionNamespace string
	// LeaderElectionIdentity is who holds the Lease; empty means
	// controller-runtime's "<hostname>_<random UUID>". One identity per Pod
	// (name and UID) lets a restarted container lead again at once.
	LeaderElectionIdentity string
	// CacheLabelSelectors scopes the Pod and Service informers to objects
	// carrying the sandbox tracking label.
	CacheLabelSelectors bool
	// SyncPeriod overrides the informer resync period (tests).
	SyncPeriod *time.Duration
	// Transport shards API connections and can give watches their own;
	// the zero value is client-go's single shared connection.
	Transport transport.Options
	// PProf adds profiling endpoints to the metrics server.
	PProf PProf

	// WebhookServer serves the conversion webhook (internal/webhook); nil
	// means none is started unless something registers a webhook.
	WebhookServer webhook.Server
}

// NewScheme returns the scheme with every type the controllers use: the
// shared base plus v1alpha1 for the conversion webhook and CRDs for its
// caBundle patching.
func NewScheme() (*runtime.Scheme, error) {
	return scheme.New(scheme.ServedVersions, apiextensionsv1.AddToScheme)
}

// New builds the manager with slim caches: managedFields are dropped from
// every cached object, and Pods keep only metadata, status and nodeName
// (Pod specs are written once at creation and never read back).
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	if opts.Transport.Connections == 0 {
		opts.Transport.Connections = 1
	}
	cfg, watchClient, err := transport.Apply(cfg, opts.Transport)
	if err != nil {
		return nil, err
	}
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Transform: slimPod},
	}
	if opts.CacheLabelSelectors {
		req, err := labels.NewRequirement(sandboxlabels.SandboxNameHash, selection.Exists, nil)
		if err != nil {
			return nil, fmt.Errorf("building cache selector: %w", err)
		}
		sel := labels.NewSelector().Add(*req)
		byObject[&corev1.Pod{}] = cache.ByObject{Transform: slimPod, Label: sel}
		byObject[&corev1.Service{}] = cache.ByObject{Label: sel}
	}
	var leaderLock resourcelock.Interface
	if opts.LeaderElect && opts.LeaderElectionIdentity != "" {
		if leaderLock, err = newLeaderLock(cfg, scheme, opts.LeaderElectionNamespace, opts.LeaderElectionIdentity); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                              scheme,
		Metrics:                             metricsserver.Options{BindAddress: opts.MetricsBindAddress, ExtraHandlers: opts.PProf.handlers()},
		HealthProbeBindAddress:              opts.HealthProbeBindAddress,
		LeaderElection:                      opts.LeaderElect,
		LeaderElectionID:                    LeaderElectionID,
		LeaderElectionNamespace:             opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel:       true,
		LeaderElectionResourceLockInterface: leaderLock,
		LeaseDuration:                       ptr.To(leaseDuration),
		RenewDeadline:                       ptr.To(renewDeadline),
		RetryPeriod:                         ptr.To(retryPeriod),
		WebhookServer:                       opts.WebhookServer,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         byObject,
			SyncPeriod:       opts.SyncPeriod,
			HTTPClient:       watchClient, // nil: shared with the clients
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if opts.HealthProbeBindAddress != "" && opts.HealthProbeBindAddress != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding health check: %w", err)
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("adding ready check: %w", err)
		}
	}
	return mgr, nil
}

// slimPod keeps what the controllers read of a Pod: metadata (without
// managedFields and finalizers), status and spec.nodeName.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	pod.Finalizers = nil
	pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName}
	return pod, nil
}

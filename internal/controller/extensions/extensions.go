// Package extensions wires the SandboxTemplate, SandboxWarmPool and
// SandboxClaim controllers into a manager: the entry point behind the
// controller binary's --extensions flag. Options mirrors the extension
// flags; Setup registers the field indexes and the three controllers.
package extensions

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/refill"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/vetting"
	"sigs.k8s.io/agent-sandbox/internal/controller/template"
	"sigs.k8s.io/agent-sandbox/internal/controller/warmpool"
)

// poolStatusWriteInterval bounds pool status writes to one per second per
// pool: replicas and readyReplicas change with every claim and every
// refill, and nothing acts on them faster than that (an HPA syncs every
// 15 s).
const poolStatusWriteInterval = time.Second

// Options configure the extension controllers. Zero values take the flag
// defaults, except for the booleans, which the caller sets from its flags
// (EnableWarmPoolEviction defaults to true on the command line).
type Options struct {
	// ClaimWorkers: --sandbox-claim-concurrent-workers (default 50).
	ClaimWorkers int
	// WarmPoolWorkers: --sandbox-warm-pool-concurrent-workers (default 1).
	WarmPoolWorkers int
	// TemplateWorkers: --sandbox-template-concurrent-workers (default 1).
	TemplateWorkers int
	// WarmPoolMaxBatchSize: --sandbox-warm-pool-max-batch-size (default 300).
	WarmPoolMaxBatchSize int
	// ReplenishDelay: --sandbox-warm-pool-replenish-delay (default 0, off).
	ReplenishDelay time.Duration
	// MaxRefillRate: --sandbox-warm-pool-max-refill-rate (default 0, off).
	MaxRefillRate float64
	// ClaimWarmWait: --sandbox-claim-warm-wait (default claim.DefaultWarmWait).
	ClaimWarmWait time.Duration
	// ReadinessGracePeriod: --sandbox-warm-pool-readiness-grace-period (5m).
	ReadinessGracePeriod time.Duration
	// UnschedulableRecheckInterval:
	// --sandbox-warm-pool-unschedulable-recheck-interval (1m).
	UnschedulableRecheckInterval time.Duration
	// EnableWarmPoolEviction: --enable-warm-pool-eviction (flag default true).
	EnableWarmPoolEviction bool
	// DisableClaimEvents: --disable-claim-events.
	DisableClaimEvents bool
	// ClaimSuccessEvents emits SandboxAdopted/SandboxProvisioned events.
	// Off by default (a deliberate difference from the published
	// controller): one write per claim that nobody acts on.
	ClaimSuccessEvents bool
	// DisableClaimObservabilityAnnotations:
	// --disable-claim-observability-annotations.
	DisableClaimObservabilityAnnotations bool
	// PersistClaimObservabilityAnnotations writes controller-first-observed-at
	// and claim-first-ready-at on claims. Off by default (a deliberate
	// difference): the times are kept in memory for the metrics.
	PersistClaimObservabilityAnnotations bool
	// ReferenceCompatibleWrites: --reference-compatible-writes. Restores
	// every claim-path write the published controller makes by default
	// (observability annotations, the sandbox-name annotation of a warm
	// adoption, success events); the disable flags still win.
	ReferenceCompatibleWrites bool
	// AllowedLabelDomains for claim additionalPodMetadata labels, read from
	// /etc/sandbox-config/allowed-label-domains (claim.ReadAllowedLabelDomains);
	// empty means sandbox.users.io.
	AllowedLabelDomains []string
	// LateBinding delivers claim env to warm Sandboxes (the controller's
	// own key, --manage-late-binding-key, or --late-binding-key-file); a
	// nil Signer keeps env claims cold.
	LateBinding claim.LateBinding
}

// Setup registers the field indexes and the three extension controllers
// with mgr. Call it once, before mgr.Start.
func Setup(mgr ctrl.Manager, opts Options) error {
	if err := index.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	tr := template.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder(template.ControllerName), template.Options{Workers: opts.TemplateWorkers})
	if err := tr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SandboxTemplate controller: %w", err)
	}
	// One registry of vetted pool members for both controllers: what the
	// pool created or compared, claims need not compare again.
	vetted := vetting.NewRegistry()
	// The pool controller reports which pools it refills; claims count
	// those pools' deficits as members on their way.
	refills := refill.NewRegistry()
	if opts.LateBinding.Signer != nil {
		// Pools inject the key into the members they render, and vetting
		// accepts exactly that rendering (latebind.InjectKey).
		vetted.SetDeliveryKey(opts.LateBinding.Signer.PublicKey())
	}
	pr := warmpool.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder(warmpool.ControllerName), warmpool.Options{
		Workers:                      opts.WarmPoolWorkers,
		MaxBatchSize:                 opts.WarmPoolMaxBatchSize,
		ReplenishDelay:               opts.ReplenishDelay,
		MaxRefillRate:                opts.MaxRefillRate,
		ReadinessGracePeriod:         opts.ReadinessGracePeriod,
		UnschedulableRecheckInterval: opts.UnschedulableRecheckInterval,
		EnableWarmPoolEviction:       opts.EnableWarmPoolEviction,
		StatusWriteInterval:          poolStatusWriteInterval,
		Vetted:                       vetted,
		Refills:                      refills,
	})
	if err := pr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SandboxWarmPool controller: %w", err)
	}
	cr := claim.NewReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(claim.ControllerName), claim.Options{
		Workers:                         opts.ClaimWorkers,
		DisableEvents:                   opts.DisableClaimEvents,
		SuccessEvents:                   opts.ClaimSuccessEvents,
		PersistObservabilityAnnotations: opts.PersistClaimObservabilityAnnotations,
		DisableObservabilityAnnotations: opts.DisableClaimObservabilityAnnotations,
		ReferenceCompatibleWrites:       opts.ReferenceCompatibleWrites,
		AllowedLabelDomains:             opts.AllowedLabelDomains,
		WarmWait:                        opts.ClaimWarmWait,
		Vetted:                          vetted,
		Refills:                         refills,
		LateBinding:                     opts.LateBinding,
	})
	if err := cr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SandboxClaim controller: %w", err)
	}
	return nil
}

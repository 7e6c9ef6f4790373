package claim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/metrics"
)

// claimState is what the controller remembers about a live claim between
// passes, keyed by namespace/name and checked against the UID so a
// recreated claim starts afresh.
type claimState struct {
	uid           types.UID
	firstObserved time.Time
	// readyRecorded guards the latency histograms against double counting
	// when the claim's Ready flaps. It replaces the claim-first-ready-at
	// annotation unless annotations are persisted.
	readyRecorded bool
	// legacyChecked: the legacy per-claim NetworkPolicy was looked for.
	legacyChecked bool
	// binding is the Sandbox this process bound the claim to; it is
	// consulted before the cache, so a pass working from a cache that has
	// not seen our own adoption or create yet cannot bind a second Sandbox.
	binding *binding
	// delivered records the late-bound env delivery sandboxd confirmed
	// (see latebind.go), so later passes do not deliver again.
	delivered string
	// deliveryFor and deliverySince: the warm Sandbox (UID) whose first
	// delivery is failing, and since when (this process's clock; a
	// restart starts the deadline again, still bounded).
	deliveryFor   types.UID
	deliverySince time.Time
	// written is the status this process last persisted, over the claim
	// version writtenOver. A pass that still sees writtenOver in the cache
	// is working from a claim our write already replaced; if it computes
	// the same status it skips the write instead of sending one doomed to
	// conflict.
	written     *extv1beta1.SandboxClaimStatus
	writtenOver string
	// refused are the Sandboxes that named the claim as their controller
	// but were not made for it (provenance.go), by UID, so each gets one
	// Warning event.
	refused map[types.UID]*refusal
}

type binding struct {
	name string
	uid  types.UID
}

// claimStates is a mutex-guarded map of claimState.
type claimStates struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*claimState
}

func newClaimStates() *claimStates {
	return &claimStates{m: map[types.NamespacedName]*claimState{}}
}

// observe records the first time the controller saw the claim.
func (s *claimStates) observe(key types.NamespacedName, uid types.UID, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[key]; ok && st.uid == uid {
		return
	}
	s.m[key] = &claimState{uid: uid, firstObserved: now}
}

// forget drops the claim's state; uid "" drops it whatever its UID.
func (s *claimStates) forget(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[key]; ok && (uid == "" || st.uid == uid) {
		delete(s.m, key)
	}
}

// with runs fn on the claim's state, creating it when missing.
func (s *claimStates) with(key types.NamespacedName, uid types.UID, now time.Time, fn func(*claimState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[key]
	if !ok || st.uid != uid {
		st = &claimState{uid: uid, firstObserved: now}
		s.m[key] = st
	}
	fn(st)
}

func (s *claimStates) get(key types.NamespacedName, uid types.UID) (claimState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.m[key]
	if !ok || st.uid != uid {
		return claimState{}, false
	}
	return *st, true
}

// launchType is the launch_type metric label of a Sandbox.
func launchType(sb *sandboxv1beta1.Sandbox) string {
	if sb == nil {
		return metrics.LaunchTypeUnknown
	}
	if sb.Labels[labels.LaunchType] == labels.LaunchTypeWarm {
		return metrics.LaunchTypeWarm
	}
	return metrics.LaunchTypeCold
}

func templateOf(sb *sandboxv1beta1.Sandbox) string {
	if sb != nil {
		if t := sb.Annotations[labels.SandboxTemplateRef]; t != "" {
			return t
		}
	}
	return metrics.UnknownTemplate
}

// countCreation increments agent_sandbox_claim_creation_total.
func countCreation(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, launch string) {
	cond := metrics.PodConditionNotReady
	if meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady) {
		cond = metrics.PodConditionReady
	}
	metrics.ClaimCreationTotal.WithLabelValues(claim.Namespace, templateOf(sb), launch, claim.Spec.WarmPoolRef.Name, cond,
		labels.NormalizeCreatedBy(claim.Labels[labels.CreatedBy])).Inc()
}

func sinceAnnotation(claim *extv1beta1.SandboxClaim, key string, now time.Time) (float64, bool) {
	v, ok := claim.Annotations[key]
	if !ok {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, false
	}
	d := now.Sub(t)
	if d < 0 {
		return 0, false // clock skew between client and controller
	}
	return float64(d) / float64(time.Millisecond), true
}

// recordReady records the startup latencies of a claim that just became
// Ready in an authoritative pass, once per claim. With persisted
// annotations, claim-first-ready-at is the once-only guard across restarts,
// as in the published controller, and is stamped here.
func (r *Reconciler) recordReady(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, wasReady bool) error {
	key := client.ObjectKeyFromObject(claim)
	now := r.now()
	persist := r.opts.persistAnnotations()
	isReady := meta.IsStatusConditionTrue(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	_, stamped := claim.Annotations[labels.ClaimFirstReadyAt]
	if wasReady || !isReady {
		if persist && wasReady && !stamped {
			// Ready before this controller saw it become so (e.g. a
			// restart): mark it so a later flap is not counted.
			return r.patchClaimAnnotation(ctx, claim, labels.ClaimFirstReadyAt, labels.ClaimFirstReadyUnknown)
		}
		return nil
	}
	if persist && stamped {
		return nil
	}
	var record bool
	var observed time.Time
	r.states.with(key, claim.UID, now, func(st *claimState) {
		record = !st.readyRecorded
		st.readyRecorded = true
		observed = st.firstObserved
	})
	if !record {
		return nil
	}
	lt, tmpl := launchType(sb), templateOf(sb)
	if ms, ok := sinceAnnotation(claim, labels.WebhookFirstObservedAt, now); ok {
		metrics.ClaimStartupLatency.WithLabelValues(lt, tmpl).Observe(ms)
	}
	if ms, ok := sinceAnnotation(claim, labels.ClientFirstRequestedAt, now); ok {
		metrics.ClientClaimStartupLatency.WithLabelValues(lt, tmpl).Observe(ms)
	}
	if ms, ok := sinceAnnotation(claim, labels.ControllerFirstObservedAt, now); ok {
		metrics.ClaimControllerStartupLatency.WithLabelValues(lt, tmpl).Observe(ms)
	} else if !observed.IsZero() {
		metrics.ClaimControllerStartupLatency.WithLabelValues(lt, tmpl).Observe(float64(now.Sub(observed)) / float64(time.Millisecond))
	}
	if sb != nil {
		if c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil && c.Status == "True" {
			if d := c.LastTransitionTime.Sub(sb.CreationTimestamp.Time); d >= 0 {
				metrics.SandboxCreationLatency.WithLabelValues(claim.Namespace, lt, tmpl).Observe(float64(d) / float64(time.Millisecond))
			}
		}
	}
	if persist {
		return r.patchClaimAnnotation(ctx, claim, labels.ClaimFirstReadyAt, now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// patchClaimAnnotation writes one claim annotation with a raw merge patch
// of just that key.
func (r *Reconciler) patchClaimAnnotation(ctx context.Context, claim *extv1beta1.SandboxClaim, key, value string) error {
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{Annotations: map[string]*string{key: &value}}}.Client()
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, claim, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("annotating claim with %s: %w", key, err)
	}
	return nil
}

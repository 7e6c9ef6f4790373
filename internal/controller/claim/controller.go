// Package claim owns the SandboxClaim controller: it binds each claim to
// exactly one Sandbox, warm from the claim's pool when one is available and
// cold (created from the pool's template) otherwise, mirrors the Sandbox's
// readiness into the claim, and enforces the claim's lifecycle.
//
// The warm path costs two writes: one merge patch of the candidate Sandbox,
// guarded by its resourceVersion, that is the reservation and the transfer
// at once (adoption.go), and one claim status write (status.go). Candidates
// come from an in-memory queue fed by the Sandbox informer (queue.go,
// watch.go), so a claim never lists. A claim finds its Sandbox again by
// status, by this process's memory of its own writes, or by the
// controller-owner index (binding.go), so a stale cache or a crash between
// the two writes can neither lose a binding nor create a second one.
//
// cold.go, env.go, vct.go and metadata_validation.go build cold Sandboxes
// and enforce the template's injection policies; lifecycle.go expires
// claims; metrics.go records startup latencies.
package claim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/refill"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/vetting"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
)

// ControllerName is the reporting controller of claim events.
const ControllerName = "sandboxclaim-controller"

// Defaults of Options.
const (
	DefaultWorkers = 50
	// DefaultWarmWait bounds how long a claim waits in its pool's line for
	// a member that is starting (waitline.go) before it creates its own
	// Sandbox; members starting for longer no longer count. It is above
	// the time a pod takes to start on a node busy refilling a pool (cold
	// claims Ready after 38–43 s p50 on the overloaded 2-core local cluster,
	// where a 30 s bound sent waiters cold just before their members came
	// up, and a 90 s bound turned 20 of those 28 cold claims warm;
	// docs/performance.md), so only a member that is stuck makes a claim
	// go cold.
	DefaultWarmWait = 90 * time.Second
	// warmWaitPoll caps one wait: the informer wakes waiters when a member
	// gets its IP, the poll only covers a lost wake-up and the bound.
	warmWaitPoll = time.Second
)

// Options configure the claim controller.
type Options struct {
	// Workers is the number of concurrent reconciles (default 50).
	Workers int
	// DisableEvents suppresses every claim event.
	DisableEvents bool
	// SuccessEvents emits SandboxAdopted and SandboxProvisioned. Off by
	// default: each is an apiserver write on the hot path that nobody
	// needs to act on. Failures always get events unless DisableEvents.
	SuccessEvents bool
	// PersistObservabilityAnnotations writes controller-first-observed-at
	// and claim-first-ready-at on claims, as the published controller does.
	// Off by default: both are kept in memory for the metrics, which saves
	// two writes per claim.
	PersistObservabilityAnnotations bool
	// DisableObservabilityAnnotations overrides the above (the published
	// --disable-claim-observability-annotations flag).
	DisableObservabilityAnnotations bool
	// ReferenceCompatibleWrites restores every claim-path write the
	// published controller makes by default and this one leaves out for
	// speed: the controller-first-observed-at and claim-first-ready-at
	// annotations (still subject to DisableObservabilityAnnotations), the
	// agents.x-k8s.io/sandbox-name annotation recording a warm adoption on
	// the claim, and the SandboxAdopted/SandboxProvisioned events (still
	// subject to DisableEvents).
	ReferenceCompatibleWrites bool
	// AllowedLabelDomains are the label domains claims may put on pods
	// (default sandbox.users.io).
	AllowedLabelDomains []string
	// WarmWait: see DefaultWarmWait (--sandbox-claim-warm-wait).
	WarmWait time.Duration
	// Vetted is the registry of genuine pool members shared with the warm
	// pool controller (nil: a private one, which only knows what this
	// controller compared itself).
	Vetted *vetting.Registry
	// Refills is where the warm pool controller of this process reports
	// which pools it refills (nil: a private, empty one, so a pool's
	// deficit never counts as members on their way; waitline.go).
	Refills *refill.Registry
	// LateBinding lets claims with env adopt warm Sandboxes (latebind.go).
	LateBinding LateBinding
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.WarmWait <= 0 {
		o.WarmWait = DefaultWarmWait
	}
	if len(o.AllowedLabelDomains) == 0 {
		o.AllowedLabelDomains = []string{DefaultAllowedLabelDomain}
	}
	if o.Vetted == nil {
		o.Vetted = vetting.NewRegistry()
		o.Vetted.SetDeliveryKey(o.LateBinding.deliveryKey())
	}
	if o.Refills == nil {
		o.Refills = refill.NewRegistry()
	}
	o.LateBinding.defaults()
}

func (o *Options) persistAnnotations() bool {
	return (o.PersistObservabilityAnnotations || o.ReferenceCompatibleWrites) && !o.DisableObservabilityAnnotations
}

func (o *Options) successEvents() bool { return o.SuccessEvents || o.ReferenceCompatibleWrites }

// Reconciler binds claims to Sandboxes.
type Reconciler struct {
	client   client.Client
	api      client.Reader
	recorder events.EventRecorder
	opts     Options
	queue    *CandidateQueue
	states   *claimStates
	vetted   *vetting.Registry
	// wakeups carries waiting claims to the work queue when a pass (not
	// an informer event) changes the line; see SetupWithManager.
	wakeups chan event.GenericEvent
	// now is the clock; tests replace it.
	now func() time.Time
	// probe checks warm members for sandboxd with this controller's key
	// (latebind_probe.go); nil when late binding is off.
	probe *prober
}

// NewReconciler returns a Reconciler. c is the cached client, api an
// uncached reader used only to settle conflicts and cache lag; recorder may
// be nil.
func NewReconciler(c client.Client, api client.Reader, recorder events.EventRecorder, opts Options) *Reconciler {
	opts.defaults()
	r := &Reconciler{
		client:   c,
		api:      api,
		recorder: recorder,
		opts:     opts,
		queue:    NewCandidateQueue(),
		states:   newClaimStates(),
		vetted:   opts.Vetted,
		wakeups:  make(chan event.GenericEvent, wakeupBuffer),
		now:      time.Now,
	}
	r.queue.inFlight = r.starting
	r.probe = newProber(&r.opts.LateBinding, r.wake)
	return r
}

// Queue exposes the candidate queue, for tests.
func (r *Reconciler) Queue() *CandidateQueue { return r.queue }

// Reconcile brings one claim to its bound, mirrored state, or expires it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	var claim extv1beta1.SandboxClaim
	if err := r.client.Get(ctx, req.NamespacedName, &claim); err != nil {
		if apierrors.IsNotFound(err) {
			r.states.forget(req.NamespacedName, "")
			r.leaveLine(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting claim: %w", err)
	}
	ctx, span := tracing.Start(ctx, &claim, "ReconcileSandboxClaim")
	defer func() { tracing.End(span, err) }()
	r.cleanupLegacyPolicy(ctx, &claim)
	if claim.DeletionTimestamp != nil {
		// The Sandbox goes with the claim through its owner reference.
		r.leaveLine(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	now := r.now()
	if err := r.initAnnotations(ctx, &claim, now); err != nil {
		return ctrl.Result{}, err
	}
	old := claim.Status.DeepCopy()
	wasReady := meta.IsStatusConditionTrue(old.Conditions, sandboxv1beta1.SandboxConditionReady)

	if at, ok := expiryTime(&claim); ok && !now.Before(at) {
		return r.expire(ctx, &claim, old)
	}

	sb, wait, err := r.reconcileActive(ctx, &claim)
	if err == nil && sb == nil && wait > 0 {
		// Warm candidates are about to get an IP: wait for them rather
		// than cold-start, without touching status.
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	applyStatus(&claim, sb, err)

	result := ctrl.Result{}
	if at, ok := expiryTime(&claim); ok {
		// The Finished condition just mirrored may have started a TTL.
		if left := at.Sub(r.now()); left > 0 {
			result.RequeueAfter = left
		} else {
			setExpired(&claim, "Claim expired. Sandbox cleanup initiated.")
			sortConditions(claim.Status.Conditions)
			result.RequeueAfter = time.Millisecond
		}
	}
	authoritative, werr := r.writeStatus(ctx, &claim, old)
	if werr != nil {
		return ctrl.Result{}, werr
	}
	// A refused Sandbox is a fact about that Sandbox, not about this
	// pass's status, so its event goes out after any successful write
	// (or none needed), once per Sandbox.
	r.reportRefusals(&claim)
	if authoritative {
		if readyReason(&claim) == extv1beta1.ClaimReasonClaimExpired && readyReason(&claim) != reasonOf(old) {
			r.event(&claim, corev1.EventTypeNormal, extv1beta1.ClaimReasonClaimExpired, "Claim Expired", "Claim expired")
		}
		r.reportFailure(&claim, old)
		r.reportLateBinding(&claim, old)
		if rerr := r.recordReady(ctx, &claim, sb, wasReady); rerr != nil {
			return ctrl.Result{}, rerr
		}
	}
	return resultFor(result, err)
}

// failureReasons are the Ready reasons that a user must act on; each gets
// a Warning event, so that kubectl describe explains a stuck claim.
var failureReasons = map[string]bool{
	extv1beta1.ClaimReasonWarmPoolNotFound:          true,
	extv1beta1.ClaimReasonTemplateNotFound:          true,
	extv1beta1.ClaimReasonInvalidMetadata:           true,
	extv1beta1.ClaimReasonEnvVarsInjectionRejected:  true,
	extv1beta1.ClaimReasonVolumeClaimTemplatesError: true,
	extv1beta1.ClaimReasonReconcilerError:           true,
}

// reportFailure emits a Warning event for a failure the pass just wrote to
// status. It runs after an authoritative status write only, and only when
// the Ready reason or message changed, so a claim stuck on the same
// failure (requeued every minute, say) gets one event, not one per pass.
func (r *Reconciler) reportFailure(claim *extv1beta1.SandboxClaim, old *extv1beta1.SandboxClaimStatus) {
	c := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if c == nil || !failureReasons[c.Reason] {
		return
	}
	if was := meta.FindStatusCondition(old.Conditions, sandboxv1beta1.SandboxConditionReady); was != nil &&
		was.Reason == c.Reason && was.Message == c.Message {
		return
	}
	r.warn(claim, c.Reason, "Reconciling", c.Message)
}

func reasonOf(st *extv1beta1.SandboxClaimStatus) string {
	if c := meta.FindStatusCondition(st.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// resultFor turns the pass's error into the controller-runtime result:
// user errors and missing references are reported, not retried with
// backoff; everything else backs off.
func resultFor(result ctrl.Result, err error) (ctrl.Result, error) {
	if err == nil {
		return result, nil
	}
	ce, ok := asClaimError(err)
	if !ok || !ce.suppress {
		return ctrl.Result{}, err
	}
	if ce.requeueAfter > 0 && (result.RequeueAfter == 0 || ce.requeueAfter < result.RequeueAfter) {
		result.RequeueAfter = ce.requeueAfter
	}
	return result, nil
}

// expire runs the two passes of expiry: first persist Ready=False/
// ClaimExpired (so clients see why before anything disappears), then clean
// up according to the shutdown policy.
func (r *Reconciler) expire(ctx context.Context, claim *extv1beta1.SandboxClaim, old *extv1beta1.SandboxClaimStatus) (ctrl.Result, error) {
	if readyReason(claim) != extv1beta1.ClaimReasonClaimExpired {
		setExpired(claim, "Claim expired. Sandbox cleanup initiated.")
		sortConditions(claim.Status.Conditions)
		authoritative, err := r.writeStatus(ctx, claim, old)
		if err != nil {
			return ctrl.Result{}, err
		}
		if authoritative {
			r.event(claim, corev1.EventTypeNormal, extv1beta1.ClaimReasonClaimExpired, "Claim Expired", "Claim expired")
		}
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	changed, err := r.reconcileExpired(ctx, claim)
	if changed {
		sortConditions(claim.Status.Conditions)
		if _, werr := r.writeStatus(ctx, claim, old); werr != nil {
			return ctrl.Result{}, werr
		}
	}
	return ctrl.Result{}, err
}

// warmSource looks up the claim's pool and its template. A missing pool is
// an error for every path; a missing template only for paths that need it.
func (r *Reconciler) warmSource(ctx context.Context, claim *extv1beta1.SandboxClaim) (*warmSource, error) {
	var pool extv1beta1.SandboxWarmPool
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Spec.WarmPoolRef.Name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errWarmPoolNotFound(claim.Spec.WarmPoolRef.Name)
		}
		return nil, fmt.Errorf("getting SandboxWarmPool %q: %w", claim.Spec.WarmPoolRef.Name, err)
	}
	src := &warmSource{pool: &pool, deliveryKey: r.opts.LateBinding.deliveryKey()}
	var tmpl extv1beta1.SandboxTemplate
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: pool.Spec.SandboxTemplateRef.Name}, &tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			return src, errTemplateNotFound(pool.Spec.SandboxTemplateRef.Name)
		}
		return src, fmt.Errorf("getting SandboxTemplate %q: %w", pool.Spec.SandboxTemplateRef.Name, err)
	}
	src.tmpl = &tmpl
	src.blueprintHash = blueprint.Hash(&tmpl)
	return src, nil
}

// reconcileActive binds the claim: to the Sandbox it already controls, else
// to a warm pool Sandbox, else to a new cold one. A positive wait (with no
// Sandbox and no error) asks the caller to come back for a warm candidate.
func (r *Reconciler) reconcileActive(ctx context.Context, claim *extv1beta1.SandboxClaim) (*sandboxv1beta1.Sandbox, time.Duration, error) {
	if err := validateAdditionalPodMetadata(claim.Spec.AdditionalPodMetadata, r.opts.AllowedLabelDomains); err != nil {
		return nil, 0, errInvalidMetadata(err)
	}
	// The pool and template come first: findBound needs them to tell the
	// claim's own Sandbox from one merely naming the claim as its owner.
	src, srcErr := r.warmSource(ctx, claim)
	sb, err := r.findBound(ctx, claim, src, srcErr)
	if err != nil {
		return nil, 0, err
	}
	if sb != nil {
		r.leaveLine(client.ObjectKeyFromObject(claim))
		if err := r.recordAssignment(ctx, claim, sb); err != nil {
			return sb, 0, err
		}
		if err := r.syncBoundMetadata(ctx, claim, sb, src, srcErr); err != nil {
			return sb, 0, err
		}
		return r.settleEnv(ctx, claim, sb, src)
	}
	if name := legacyAssignment(claim); name != "" {
		sb, err := r.resolveLegacyAssignment(ctx, claim, name, src)
		if err != nil || sb != nil {
			return sb, 0, err
		}
	}
	if err := r.checkNameClash(ctx, claim, src); err != nil {
		return nil, 0, err
	}
	if src == nil {
		return nil, 0, srcErr
	}
	// Env stays on the warm path when it can be late-bound (latebind.go).
	plan, err := r.planLateBinding(ctx, claim, src)
	if err != nil {
		return nil, 0, err
	}
	coldWhy := ""
	if plan.warm && len(claim.Spec.VolumeClaimTemplates) == 0 {
		sb, took, err := r.adoptFromQueue(ctx, claim, src)
		if err != nil {
			r.queue.Release(PoolKey(claim.Namespace, claim.Spec.WarmPoolRef.Name), client.ObjectKeyFromObject(claim))
			return nil, 0, err
		}
		if sb != nil {
			r.leaveLine(client.ObjectKeyFromObject(claim))
			r.remember(claim, sb)
			r.adopted(claim, sb)
			if err := r.recordAssignment(ctx, claim, sb); err != nil {
				return sb, 0, err
			}
			return r.settleEnv(ctx, claim, sb, src)
		}
		var wait time.Duration
		if wait, coldWhy = r.warmWait(ctx, claim, took); wait > 0 {
			return nil, wait, nil
		}
		// Members skipped for the claim's env: wait for a pending probe
		// verdict, within the same bound, or say why it goes cold.
		var lateWhy string
		if wait, lateWhy = r.lateWait(claim, src); wait > 0 {
			return nil, wait, nil
		} else if lateWhy != "" {
			plan.why = lateWhy
		}
	}
	if src.tmpl == nil {
		return nil, 0, srcErr
	}
	sb, err = r.createCold(ctx, claim, src)
	if err != nil {
		return nil, 0, err
	}
	if plan.why != "" {
		r.lateBindingUnavailable(claim, plan.why)
	}
	r.remember(claim, sb)
	r.provisioned(claim, sb)
	if coldWhy != "" {
		// After the create: events follow the write they explain.
		r.event(claim, corev1.EventTypeNormal, ReasonColdStartFallback, "Provisioning", "No warm Sandbox for this claim: "+coldWhy+"; created a cold one")
	}
	return sb, 0, nil
}

// recordAssignment writes the agents.x-k8s.io/sandbox-name annotation on
// the claim for a warm Sandbox, as the published controller does, when
// ReferenceCompatibleWrites asks for it. This controller does not need it:
// the adoption patch is the reservation and the owner reference the record
// (see binding.go); tools that read the annotation do.
func (r *Reconciler) recordAssignment(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) error {
	if !r.opts.ReferenceCompatibleWrites || sb.Name == claim.Name || claim.Annotations[labels.SandboxName] == sb.Name {
		return nil
	}
	return r.patchClaimAnnotation(ctx, claim, labels.SandboxName, sb.Name)
}

func (r *Reconciler) adopted(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) {
	countCreation(claim, sb, labels.LaunchTypeWarm)
	if r.opts.successEvents() {
		r.event(claim, corev1.EventTypeNormal, "SandboxAdopted", "Adoption", fmt.Sprintf("Adopted warm pool Sandbox %q", sb.Name))
	}
}

func (r *Reconciler) provisioned(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) {
	countCreation(claim, sb, labels.LaunchTypeCold)
	if r.opts.successEvents() {
		r.event(claim, corev1.EventTypeNormal, "SandboxProvisioned", "Provisioning", fmt.Sprintf("Created Sandbox %q", sb.Name))
	}
}

// syncBoundMetadata keeps a bound Sandbox's metadata in line with the claim
// (KEP-174: later edits of additionalPodMetadata reach the live Pod without
// a restart): launch-type set once, created-by following the claim, a
// missing template-ref-hash restored, pod template metadata = template +
// claim. Nothing is written when all of it already holds.
func (r *Reconciler) syncBoundMetadata(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource, srcErr error) error {
	var tmpl *extv1beta1.SandboxTemplate
	if src != nil {
		tmpl = src.tmpl
	}
	if tmpl == nil && srcErr != nil && hasPodMetadata(claim) {
		// The claim's metadata must be checked against the template's.
		return srcErr
	}
	p, err := boundMetadataPatch(claim, sb, tmpl)
	if err != nil || p.Empty() {
		return err
	}
	patch, err := p.Client()
	if err != nil {
		return err
	}
	if err := r.client.Patch(ctx, sb, patch); err != nil {
		return fmt.Errorf("updating metadata of sandbox %q: %w", sb.Name, err)
	}
	return nil
}

// boundMetadataPatch is syncBoundMetadata's merge patch (Empty when all
// of it already holds): the Sandbox labels to change and, when the Pod's
// user-visible metadata must change, spec.podTemplate.metadata.
func boundMetadataPatch(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, tmpl *extv1beta1.SandboxTemplate) (mergepatch.Patch, error) {
	ls := map[string]*string{}
	if _, ok := sb.Labels[labels.LaunchType]; !ok {
		lt := labels.LaunchTypeCold
		if sb.Name != claim.Name {
			lt = labels.LaunchTypeWarm
		}
		ls[labels.LaunchType] = mergepatch.Set(lt)
	}
	if v, ok := claim.Labels[labels.CreatedBy]; ok && sb.Labels[labels.CreatedBy] != v {
		ls[labels.CreatedBy] = mergepatch.Set(v)
	} else if _, has := sb.Labels[labels.CreatedBy]; !ok && has {
		ls[labels.CreatedBy] = nil
	}
	refHash := sb.Labels[labels.SandboxTemplateRefHash]
	if refHash == "" && tmpl != nil {
		refHash = labels.NameHash(tmpl.Name)
		ls[labels.SandboxTemplateRefHash] = mergepatch.Set(refHash)
	}
	if sb.Labels[labels.ClaimUID] != string(claim.UID) {
		ls[labels.ClaimUID] = mergepatch.Set(string(claim.UID))
	}
	wantL, wantA, err := desiredPodMetadata(sb.Spec.PodTemplate.ObjectMeta, tmpl, claim)
	if err != nil {
		return mergepatch.Patch{}, err
	}
	p := mergepatch.Patch{Meta: mergepatch.Meta{Labels: ls}}
	if pm := podMetadataPatch(sb.Spec.PodTemplate.ObjectMeta, wantL, wantA, claim, refHash); pm != nil {
		p.Fields = podTemplateMetadata(pm)
	}
	return p, nil
}

func hasPodMetadata(claim *extv1beta1.SandboxClaim) bool {
	md := claim.Spec.AdditionalPodMetadata
	return len(md.Labels) > 0 || len(md.Annotations) > 0
}

// initAnnotations persists controller-first-observed-at when asked to; by
// default the time only lives in memory (see Options).
func (r *Reconciler) initAnnotations(ctx context.Context, claim *extv1beta1.SandboxClaim, now time.Time) error {
	var first time.Time
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, now, func(st *claimState) { first = st.firstObserved })
	if !r.opts.persistAnnotations() {
		return nil
	}
	if _, ok := claim.Annotations[labels.ControllerFirstObservedAt]; ok {
		return nil
	}
	return r.patchClaimAnnotation(ctx, claim, labels.ControllerFirstObservedAt, first.UTC().Format(time.RFC3339Nano))
}

// cleanupLegacyPolicy deletes the per-claim NetworkPolicy older versions
// created, once per claim and only if this claim controls it. Errors are
// logged, never block the claim.
func (r *Reconciler) cleanupLegacyPolicy(ctx context.Context, claim *extv1beta1.SandboxClaim) {
	var done bool
	r.states.with(client.ObjectKeyFromObject(claim), claim.UID, r.now(), func(st *claimState) {
		done, st.legacyChecked = st.legacyChecked, true
	})
	if done {
		return
	}
	var np networkingv1.NetworkPolicy
	err := r.client.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: claim.Name + "-network-policy"}, &np)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("cannot look for a legacy claim NetworkPolicy", "error", err.Error())
		}
		return
	}
	ref := metav1.GetControllerOfNoCopy(&np)
	if !index.IsExtensionKind(ref, "SandboxClaim") || ref.UID != claim.UID {
		return
	}
	uid := np.UID
	if err := r.client.Delete(ctx, &np, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		log.FromContext(ctx).Info("cannot delete the legacy claim NetworkPolicy", "error", err.Error())
	}
}

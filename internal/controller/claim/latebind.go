package claim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// LateBinding configures the delivery of claim env to warm Sandboxes
// (package latebind). With a nil Signer every claim with env cold-starts,
// as in the published controller.
type LateBinding struct {
	// Signer holds the controller's delivery key.
	Signer *latebind.Signer
	// Port is sandboxd's REST port (default latebind.DefaultPort).
	Port int
	// Client sends deliveries (default: 5 s timeout, no proxy).
	Client *http.Client
	// DeliveryDeadline: see DefaultDeliveryDeadline (tests shorten it).
	DeliveryDeadline time.Duration
}

func (lb *LateBinding) enabled() bool { return lb != nil && lb.Signer != nil }

// deliveryKey is the public key pools inject into their members ("" when
// late binding is off).
func (lb *LateBinding) deliveryKey() string {
	if !lb.enabled() {
		return ""
	}
	return lb.Signer.PublicKey()
}

func (lb *LateBinding) defaults() {
	if lb.Port == 0 {
		lb.Port = latebind.DefaultPort
	}
	if lb.DeliveryDeadline <= 0 {
		lb.DeliveryDeadline = DefaultDeliveryDeadline
	}
	if lb.Client == nil {
		// Pod IPs are never reached through an HTTP proxy.
		lb.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	}
}

// DefaultDeliveryDeadline bounds how long a claim waits for its env to be
// applied in the warm Sandbox it adopted before it gives that Sandbox up
// and starts cold. Only members that answered the probe are adopted, so a
// healthy delivery takes milliseconds and retries cover a sandboxd that
// restarts once; 30 s is well past that and still far below what a user
// waiting for a claim tolerates (a cold start on a loaded node takes about
// as long again).
const DefaultDeliveryDeadline = 30 * time.Second

// lateBindingPlan is what the template says about a claim's env.
type lateBindingPlan struct {
	// warm: the claim may adopt a warm Sandbox (no env, or env that can
	// be late-bound).
	warm bool
	// container receives the env.
	container string
	// why the env cannot be late-bound ("" when it can, or when late
	// binding is off altogether and nothing needs explaining).
	why string
}

// planLateBinding applies the cold path's env rules to the template (so a
// Disallowed template refuses here exactly as it would there, and Allowed
// refuses overriding a template variable) and decides whether the env can
// be delivered after adoption instead: only to one regular container whose
// env carries this controller's delivery key, i.e. one that runs a sandboxd
// trusting it. Anything else cold-starts with the env in the Pod spec.
func (r *Reconciler) planLateBinding(ctx context.Context, claim *extv1beta1.SandboxClaim, src *warmSource) (lateBindingPlan, error) {
	if len(claim.Spec.Env) == 0 {
		return lateBindingPlan{warm: true}, nil
	}
	if src.tmpl == nil {
		return lateBindingPlan{}, nil
	}
	// The pool's rendering, with the key it injects: the plan must hold for
	// what the members are, not for the bare template.
	spec := src.tmpl.Spec.PodTemplate.Spec.DeepCopy()
	latebind.InjectKey(src.tmpl.Spec.EnvVarsInjectionPolicy, spec, r.opts.LateBinding.deliveryKey())
	if err := injectEnv(src.tmpl, spec.DeepCopy(), claim.Spec.Env); err != nil {
		return lateBindingPlan{}, err
	}
	if _, err := r.resolveEnv(ctx, claim, false); err != nil {
		return lateBindingPlan{}, err
	}
	if !r.opts.LateBinding.enabled() {
		return lateBindingPlan{}, nil
	}
	name, why := r.lateTarget(spec, claim)
	if why != "" {
		return lateBindingPlan{why: why}, nil
	}
	return lateBindingPlan{warm: true, container: name}, nil
}

// lateTarget returns the one container of spec that takes all of the
// claim's env by late binding, or why there is none.
func (r *Reconciler) lateTarget(spec *corev1.PodSpec, claim *extv1beta1.SandboxClaim) (string, string) {
	if len(spec.Containers) == 0 {
		return "", "the template has no container"
	}
	name := ""
	for _, e := range claim.Spec.Env {
		n := e.ContainerName
		if n == "" {
			n = spec.Containers[0].Name
		}
		if name != "" && n != name {
			return "", "the env targets more than one container"
		}
		name = n
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != name {
			continue
		}
		for _, e := range c.Env {
			if e.Name == latebind.KeyEnv && e.ValueFrom == nil && e.Value == r.opts.LateBinding.Signer.PublicKey() {
				return name, ""
			}
		}
		return "", fmt.Sprintf("container %q does not run sandboxd with this controller's delivery key (env %s)", name, latebind.KeyEnv)
	}
	return "", fmt.Sprintf("container %q is not a regular container", name)
}

// lateBindableMember re-checks the plan against a candidate's own spec: a
// member made from an older template may lack the key or define a variable
// an Allowed policy must not override. Such a member stays in the queue
// for claims without env.
func (r *Reconciler) lateBindableMember(cand *sandboxv1beta1.Sandbox, claim *extv1beta1.SandboxClaim, src *warmSource) bool {
	if len(claim.Spec.Env) == 0 {
		return true
	}
	if src.tmpl == nil || injectEnv(src.tmpl, cand.Spec.PodTemplate.Spec.DeepCopy(), claim.Spec.Env) != nil {
		return false
	}
	if _, why := r.lateTarget(&cand.Spec.PodTemplate.Spec, claim); why != "" {
		return false
	}
	// The spec says the pool injected the key; only the prober's verdict
	// says a sandboxd trusting it runs there (latebind_probe.go).
	switch r.probe.verdict(cand.UID) {
	case verdictYes:
		return true
	case verdictPending:
		src.late.pending = true
	case verdictUnknown:
		c := candidateOf(cand)
		if c.Ready || r.starting(&c) {
			// Probed as soon as the feed sees it Ready.
			src.late.pending = true
		} else {
			src.late.unverified = true
		}
	default:
		src.late.unverified = true
	}
	return false
}

// lateSkips is what a pass learnt about the members it skipped for an env
// claim.
type lateSkips struct {
	// pending: a member may still prove it runs sandboxd (its probe is
	// under way, or it is starting and will be probed once Ready).
	pending bool
	// unverified: a member has shown it does not.
	unverified bool
}

// noVerifiedMember is the cold-start reason of an env claim whose pool has
// members, none of which has shown sandboxd with this controller's key.
const noVerifiedMember = "no warm member has shown sandboxd with this controller's key"

// lateWait decides for an env claim that adopted nothing: a positive wait
// when a member's verdict is still pending and the claim is within the
// wait line's bound (it is woken by the verdict), else why it goes cold
// ("" when no member was skipped for its env).
func (r *Reconciler) lateWait(claim *extv1beta1.SandboxClaim, src *warmSource) (time.Duration, string) {
	if len(claim.Spec.Env) == 0 || (!src.late.pending && !src.late.unverified) {
		return 0, ""
	}
	if src.late.pending && r.probe != nil {
		since := r.now()
		if st, ok := r.states.get(client.ObjectKeyFromObject(claim), claim.UID); ok && !st.firstObserved.IsZero() {
			since = st.firstObserved
		}
		if left := r.opts.WarmWait - r.now().Sub(since); left > 0 {
			r.probe.waitFor(PoolKey(claim.Namespace, claim.Spec.WarmPoolRef.Name), client.ObjectKeyFromObject(claim))
			return min(left, warmWaitPoll), ""
		}
	}
	return 0, noVerifiedMember
}

// lateBindingUnavailable records on the claim why its env forced a cold
// start, as a condition persisted by this pass's status write; the event
// follows that write (reportLateBinding).
func (r *Reconciler) lateBindingUnavailable(claim *extv1beta1.SandboxClaim, why string) {
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: extv1beta1.ClaimConditionLateBinding, Status: metav1.ConditionFalse, ObservedGeneration: claim.Generation,
		Reason: extv1beta1.ClaimReasonLateBindingUnavailable, Message: "cold start: " + why,
	})
}

// reportLateBinding emits the LateBindingUnavailable event for a condition
// the pass just wrote. Called after an authoritative status write only,
// and only when the condition is new or changed, so a failed write (and
// its retry) never produces an event for a state nobody can read, and a
// claim gets one event, not one per pass.
func (r *Reconciler) reportLateBinding(claim *extv1beta1.SandboxClaim, old *extv1beta1.SandboxClaimStatus) {
	c := meta.FindStatusCondition(claim.Status.Conditions, extv1beta1.ClaimConditionLateBinding)
	if c == nil || (c.Reason != extv1beta1.ClaimReasonLateBindingUnavailable && c.Reason != extv1beta1.ClaimReasonEnvDeliveryFailed) {
		return
	}
	if was := meta.FindStatusCondition(old.Conditions, extv1beta1.ClaimConditionLateBinding); was != nil &&
		was.Reason == c.Reason && was.Message == c.Message {
		return
	}
	if c.Reason == extv1beta1.ClaimReasonEnvDeliveryFailed {
		r.warn(claim, c.Reason, "Provisioning", c.Message)
		return
	}
	r.event(claim, corev1.EventTypeNormal, extv1beta1.ClaimReasonLateBindingUnavailable, "Provisioning",
		"Env cannot be late-bound, starting cold: "+strings.TrimPrefix(c.Message, "cold start: "))
}

func errEnvDeliveryPending(detail string) error {
	return &claimError{reason: extv1beta1.ClaimReasonEnvDeliveryPending, message: "waiting for the env to be applied in the sandbox: " + detail,
		keepSandboxStatus: true}
}

// deliverEnv makes sure the claim's env is applied in the warm Sandbox it
// controls, and fails the pass (so Ready stays False and the pass backs
// off) until sandboxd confirmed it. It is level-triggered: whatever this
// process remembers, a pass that finds a warm Sandbox bound to an env claim
// without a confirmation delivers, and sandboxd's idempotence makes a
// repeat (after a controller restart, say) harmless.
func (r *Reconciler) deliverEnv(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource) error {
	if len(claim.Spec.Env) == 0 {
		return nil
	}
	if sb.Name == claim.Name {
		// A cold Sandbox: the env is in its Pod spec. Level-triggered, the
		// reason it went cold is derived again until a status write kept
		// it (the pass that created it may have lost its write).
		if lb := meta.FindStatusCondition(claim.Status.Conditions, extv1beta1.ClaimConditionLateBinding); lb == nil && src != nil {
			if plan, err := r.planLateBinding(ctx, claim, src); err == nil && plan.why != "" {
				r.lateBindingUnavailable(claim, plan.why)
			}
		}
		return nil
	}
	return r.boundDelivery(claim, sb, src, r.deliverWarm(ctx, claim, sb, src))
}

// deliverWarm delivers the claim's env to the warm Sandbox it controls.
func (r *Reconciler) deliverWarm(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource) error {
	lb := &r.opts.LateBinding
	if !lb.enabled() {
		return errEnvDeliveryPending("late binding is not configured on this controller")
	}
	// The trust decision: never hand a claim's env to a Sandbox the claim
	// (by UID) does not control.
	if !controlledBy(sb, claim) {
		return errEnvDeliveryPending(fmt.Sprintf("sandbox %q is not controlled by this claim", sb.Name))
	}
	if src == nil || src.tmpl == nil {
		return errEnvDeliveryPending("the template is unknown")
	}
	if err := injectEnv(src.tmpl, sb.Spec.PodTemplate.Spec.DeepCopy(), claim.Spec.Env); err != nil {
		return err
	}
	container, why := r.lateTarget(&sb.Spec.PodTemplate.Spec, claim)
	if why != "" {
		return errEnvDeliveryPending(why)
	}
	if len(sb.Status.PodIPs) == 0 {
		return errEnvDeliveryPending("the sandbox has no pod IP")
	}
	ready := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue {
		// Restarting, resuming or not up yet: sandboxd may not serve.
		return errEnvDeliveryPending("the sandbox is not ready")
	}
	ip := sb.Status.PodIPs[0]
	// What was delivered to: this Sandbox, at this address, for this claim
	// generation, since the Sandbox last turned Ready. sandboxd keeps the
	// env in memory only, so a restarted sandboxd (a crashed container, a
	// resumed Pod) has none; it is not Ready again before it serves, and
	// that transition makes a new mark, so the first pass that sees it
	// Ready again delivers again (idempotent if nothing was lost).
	mark := string(sb.UID) + "/" + ip + "/" + strconv.FormatInt(claim.Generation, 10) + "/" + ready.LastTransitionTime.UTC().Format(time.RFC3339Nano)
	key := client.ObjectKeyFromObject(claim)
	done := false
	r.states.with(key, claim.UID, r.now(), func(st *claimState) { done = st.delivered == mark })
	if !done {
		p := latebind.Payload{Namespace: sb.Namespace, Sandbox: sb.Name, SandboxUID: string(sb.UID), ClaimUID: string(claim.UID),
			Container: container, Target: ip}
		vars, err := r.resolveEnv(ctx, claim, true)
		if err != nil {
			return err
		}
		p.Env = vars
		env, err := lb.Signer.Sign(p)
		if err != nil {
			return err
		}
		ack, err := latebind.Deliver(ctx, lb.Client, ip, lb.Port, env)
		if err != nil {
			log.FromContext(ctx).V(1).Info("env delivery failed; retrying", "sandbox", sb.Name, "error", err.Error())
			return errEnvDeliveryPending(err.Error())
		}
		if ack.ClaimUID != string(claim.UID) || ack.Digest != p.Digest() {
			return errEnvDeliveryPending("sandboxd confirmed another env")
		}
		r.states.with(key, claim.UID, r.now(), func(st *claimState) { st.delivered = mark })
	}
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: extv1beta1.ClaimConditionLateBinding, Status: metav1.ConditionTrue, ObservedGeneration: claim.Generation,
		Reason: extv1beta1.ClaimReasonEnvApplied, Message: fmt.Sprintf("env applied in container %q", container),
	})
	return nil
}

// lateGiveUp: the warm Sandbox did not take the env in time; the claim
// releases it and starts cold (releaseToCold).
type lateGiveUp struct{ why string }

func (e *lateGiveUp) Error() string { return "env delivery failed: " + e.why }

// boundDelivery bounds the first delivery to a warm Sandbox: a pending
// delivery that has not succeeded within the deadline (or whose Sandbox
// is being deleted) becomes lateGiveUp. A claim whose env was applied once
// is never given up: its sandbox may hold the user's work, and a sandboxd
// that restarts for good leaves it not Ready, as it would a claim without
// env.
func (r *Reconciler) boundDelivery(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource, err error) error {
	key := client.ObjectKeyFromObject(claim)
	if err == nil {
		r.states.with(key, claim.UID, r.now(), func(st *claimState) { st.deliveryFor, st.deliverySince = "", time.Time{} })
		return nil
	}
	ce, ok := asClaimError(err)
	if !ok || ce.reason != extv1beta1.ClaimReasonEnvDeliveryPending || src == nil || src.tmpl == nil {
		return err
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, extv1beta1.ClaimConditionLateBinding); c != nil && c.Reason == extv1beta1.ClaimReasonEnvApplied {
		return err
	}
	now := r.now()
	var since time.Time
	r.states.with(key, claim.UID, now, func(st *claimState) {
		if st.deliveryFor != sb.UID {
			st.deliveryFor, st.deliverySince = sb.UID, now
		}
		since = st.deliverySince
	})
	deadline := r.opts.LateBinding.DeliveryDeadline
	switch {
	case sb.DeletionTimestamp != nil:
		return &lateGiveUp{why: fmt.Sprintf("warm sandbox %q is being deleted before the env was applied", sb.Name)}
	case now.Sub(since) >= deadline:
		return &lateGiveUp{why: fmt.Sprintf("env not applied in warm sandbox %q within %s (%s)", sb.Name, deadline, ce.message)}
	}
	// Retry on a timer no later than the deadline, so the give-up happens
	// on time whatever the backoff has grown to.
	ce.requeueAfter = min(deadline-now.Sub(since), time.Second)
	ce.suppress = true
	return ce
}

// settleEnv runs deliverEnv for the claim's bound Sandbox and, when the
// warm delivery was given up, releases that Sandbox and binds the claim to
// a new cold one with the env in its Pod spec.
func (r *Reconciler) settleEnv(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource) (*sandboxv1beta1.Sandbox, time.Duration, error) {
	err := r.deliverEnv(ctx, claim, sb, src)
	var give *lateGiveUp
	if !errors.As(err, &give) {
		return sb, 0, err
	}
	cold, err := r.releaseToCold(ctx, claim, sb, src, give.why)
	return cold, 0, err
}

// releaseToCold deletes the warm Sandbox the claim controls (by UID, so
// never another one of the same name) and creates the claim's cold
// Sandbox. Nothing leaks: the warm Sandbox's Pod goes with it, and the cold
// one is owned by the claim like any other.
func (r *Reconciler) releaseToCold(ctx context.Context, claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox, src *warmSource, why string) (*sandboxv1beta1.Sandbox, error) {
	if sb.DeletionTimestamp == nil {
		uid := sb.UID
		if err := r.client.Delete(ctx, sb, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return sb, fmt.Errorf("releasing warm sandbox %q after a failed env delivery: %w", sb.Name, err)
		}
		log.FromContext(ctx).Info("env delivery failed; released the warm sandbox, starting cold", "sandbox", sb.Name, "why", why)
	}
	r.forgetBinding(claim)
	cold, err := r.createCold(ctx, claim, src)
	if err != nil {
		return nil, err
	}
	r.remember(claim, cold)
	r.provisioned(claim, cold)
	meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{
		Type: extv1beta1.ClaimConditionLateBinding, Status: metav1.ConditionFalse, ObservedGeneration: claim.Generation,
		Reason: extv1beta1.ClaimReasonEnvDeliveryFailed, Message: why + "; deleted it and started a cold sandbox with the env in its Pod spec",
	})
	return cold, nil
}

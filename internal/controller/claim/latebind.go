package claim

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	if lb.Client == nil {
		// Pod IPs are never reached through an HTTP proxy.
		lb.Client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	}
}

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
	_, why := r.lateTarget(&cand.Spec.PodTemplate.Spec, claim)
	return why == ""
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
	if c == nil || c.Reason != extv1beta1.ClaimReasonLateBindingUnavailable {
		return
	}
	if was := meta.FindStatusCondition(old.Conditions, extv1beta1.ClaimConditionLateBinding); was != nil &&
		was.Reason == c.Reason && was.Message == c.Message {
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

package remote

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sbcontroller "sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
)

// Display states of a sandbox, as `ls` shows them.
const (
	StateRunning     = "Running"
	StatePending     = "Pending"
	StateSuspending  = "Suspending"
	StateSuspended   = "Suspended"
	StateTerminating = "Terminating"
	StateExpired     = "Expired"
	StateFinished    = "Finished"
	StateFailed      = "Failed"
)

// failedClaimReasons are claim Ready=False reasons that no amount of
// waiting fixes: the claim or its pool/template must change.
var failedClaimReasons = map[string]bool{
	extv1beta1.ClaimReasonTemplateNotFound:          true,
	extv1beta1.ClaimReasonWarmPoolNotFound:          true,
	extv1beta1.ClaimReasonInvalidMetadata:           true,
	extv1beta1.ClaimReasonEnvVarsInjectionRejected:  true,
	extv1beta1.ClaimReasonVolumeClaimTemplatesError: true,
}

// IsFailedClaimReason reports whether a claim's Ready reason is terminal.
func IsFailedClaimReason(reason string) bool { return failedClaimReasons[reason] }

// State summarizes a claim and/or its Sandbox (either may be nil, not
// both) as one word, plus the reason of the Ready condition behind it.
func State(claim *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) (state, reason string) {
	if (claim != nil && claim.DeletionTimestamp != nil) || (sb != nil && sb.DeletionTimestamp != nil) {
		return StateTerminating, ""
	}
	if sb == nil {
		if claim == nil {
			return StatePending, ""
		}
		c := meta.FindStatusCondition(claim.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
		if c == nil {
			return StatePending, ""
		}
		switch {
		case c.Status == metav1.ConditionTrue:
			// Bound and Ready, but the Sandbox is not visible (yet).
			return StatePending, c.Reason
		case c.Reason == extv1beta1.ClaimReasonClaimExpired || c.Reason == extv1beta1.ClaimReasonSandboxExpired:
			return StateExpired, c.Reason
		case IsFailedClaimReason(c.Reason):
			return StateFailed, c.Reason
		}
		return StatePending, c.Reason
	}
	ready := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	reason = ""
	if ready != nil {
		reason = ready.Reason
	}
	if sb.IsSuspended() {
		if meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionSuspended) {
			return StateSuspended, reason
		}
		return StateSuspending, reason
	}
	switch {
	case ready != nil && ready.Status == metav1.ConditionTrue:
		return StateRunning, reason
	case meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionFinished):
		return StateFinished, reason
	case reason == sandboxv1beta1.ReasonSandboxExpired:
		return StateExpired, reason
	case reason == sandboxv1beta1.ReasonPodFailed:
		return StateFailed, reason
	}
	return StatePending, reason
}

// IsReady reports whether sb's Ready condition is True.
func IsReady(sb *sandboxv1beta1.Sandbox) bool {
	return sb != nil && meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
}

// ReadyMessage is the message of sb's Ready condition while it is not
// Ready ("" when Ready or unknown).
func ReadyMessage(sb *sandboxv1beta1.Sandbox) string {
	if sb == nil {
		return ""
	}
	c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if c == nil || c.Status == metav1.ConditionTrue {
		return ""
	}
	return c.Message
}

// Problem is what keeps sb's Pod from becoming Ready, as the controller
// reports it after the Ready message ("" when it reports none, e.g. the
// Pod is merely starting).
func Problem(sb *sandboxv1beta1.Sandbox) string {
	_, p, _ := strings.Cut(ReadyMessage(sb), sbcontroller.ProblemSeparator)
	return p
}

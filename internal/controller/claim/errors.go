package claim

import (
	"errors"
	"fmt"
	"time"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// claimError is an outcome of a pass that the claim's Ready condition
// reports with its own reason. Errors of this type that the user must fix
// (bad metadata, refused env or volumes, a missing pool) are not retried
// with backoff: they are reported and, where something else can fix them,
// retried on a timer or by a watch.
type claimError struct {
	reason  string
	message string
	// requeueAfter retries on a timer instead of backoff (0 = no timer).
	requeueAfter time.Duration
	// suppress means "report, do not return an error": retrying cannot
	// help until the user changes something, which re-enqueues the claim.
	suppress bool
	// keepSandboxStatus leaves status.sandbox untouched for this pass.
	keepSandboxStatus bool
	// clearSandboxStatus forgets the bound sandbox in status.
	clearSandboxStatus bool
}

func (e *claimError) Error() string { return e.message }

// requeue intervals for conditions that other objects' watches usually
// resolve sooner.
const (
	missingRefRequeue    = time.Minute
	createPendingRequeue = 200 * time.Millisecond
)

func errWarmPoolNotFound(name string) error {
	return &claimError{reason: extv1beta1.ClaimReasonWarmPoolNotFound, message: fmt.Sprintf("SandboxWarmPool %q not found", name),
		requeueAfter: missingRefRequeue, suppress: true, keepSandboxStatus: true}
}

func errTemplateNotFound(name string) error {
	return &claimError{reason: extv1beta1.ClaimReasonTemplateNotFound, message: fmt.Sprintf("SandboxTemplate %q not found", name),
		requeueAfter: missingRefRequeue, suppress: true, keepSandboxStatus: true}
}

func errInvalidMetadata(detail error) error {
	return &claimError{reason: extv1beta1.ClaimReasonInvalidMetadata, message: "invalid additionalPodMetadata: " + detail.Error(),
		suppress: true, keepSandboxStatus: true}
}

func errEnvRejected(detail string) error {
	return &claimError{reason: extv1beta1.ClaimReasonEnvVarsInjectionRejected, message: "environment variable injection rejected: " + detail,
		suppress: true, keepSandboxStatus: true}
}

func errVolumeClaimTemplates(detail error) error {
	return &claimError{reason: extv1beta1.ClaimReasonVolumeClaimTemplatesError, message: detail.Error(),
		suppress: true, keepSandboxStatus: true}
}

func errCreatePending() error {
	return &claimError{reason: extv1beta1.ClaimReasonSandboxCreatePending, message: "Sandbox already created; waiting for cache to converge",
		requeueAfter: createPendingRequeue, suppress: true, keepSandboxStatus: true}
}

func errAdoptionConflict(detail string) error {
	return &claimError{reason: extv1beta1.ClaimReasonAdoptionConflict,
		message: detail + "; the next pass retries from a converged view", keepSandboxStatus: true}
}

func asClaimError(err error) (*claimError, bool) {
	var ce *claimError
	if errors.As(err, &ce) {
		return ce, true
	}
	return nil, false
}

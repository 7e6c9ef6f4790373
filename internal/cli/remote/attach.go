package remote

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// ErrWarmMember: the name is an idle warm-pool member, which belongs to
// its pool until a claim takes it; working in it would hand the next
// claimant a used sandbox.
var ErrWarmMember = errors.New("the sandbox is an unclaimed warm-pool member")

// ErrSuspended: the sandbox is suspended and has no Pod to talk to.
var ErrSuspended = errors.New("the sandbox is suspended")

// Attach connects to the target's sandbox through the SDK client's
// connection strategy (router tunnel, router URL or Gateway): through its
// claim when it has one, else to the Sandbox by name, as the router
// resolves it (a Sandbox created from a template, with kubectl or by a
// controller of the user's). The caller Disconnects the handle when done:
// Close would delete a claim.
func Attach(ctx context.Context, cl *sandbox.Client, t *Target) (*sandbox.Sandbox, error) {
	if t.Sandbox != nil && t.Sandbox.IsSuspended() {
		return nil, fmt.Errorf("sandbox %s/%s: %w", t.Namespace, t.Name(), ErrSuspended)
	}
	var (
		sb  *sandbox.Sandbox
		err error
	)
	switch {
	case t.Claim != nil:
		sb, err = cl.GetSandbox(ctx, t.Claim.Name, t.Namespace)
	case t.Sandbox == nil:
		return nil, &NotFoundError{Namespace: t.Namespace, Name: t.Name()}
	default:
		if kind, pool := Owner(t.Sandbox); IsWarmPoolKind(kind) {
			return nil, fmt.Errorf("sandbox %s/%s of warm pool %s: %w", t.Namespace, t.Sandbox.Name, pool, ErrWarmMember)
		}
		sb, err = cl.AttachSandbox(ctx, t.Sandbox.Name, t.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to sandbox %s/%s: %w", t.Namespace, t.Name(), err)
	}
	return sb, nil
}

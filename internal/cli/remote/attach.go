package remote

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// ErrNoClaim: the Go SDK attaches to sandboxes through their SandboxClaim,
// and this Sandbox has none (it was created from a template or directly).
var ErrNoClaim = errors.New("the sandbox has no SandboxClaim, and commands and files reach sandboxes through their claim")

// ErrSuspended: the sandbox is suspended and has no Pod to talk to.
var ErrSuspended = errors.New("the sandbox is suspended")

// Attach connects to the target's sandbox through the SDK client's
// connection strategy (router tunnel, router URL or Gateway). The target
// must be a claim bound to a Ready Sandbox. The caller Disconnects the
// handle when done: Close would delete the claim.
func Attach(ctx context.Context, cl *sandbox.Client, t *Target) (*sandbox.Sandbox, error) {
	if t.Claim == nil {
		return nil, fmt.Errorf("sandbox %s/%s: %w", t.Namespace, t.Name(), ErrNoClaim)
	}
	if t.Sandbox != nil && t.Sandbox.IsSuspended() {
		return nil, fmt.Errorf("sandbox %s/%s: %w", t.Namespace, t.Name(), ErrSuspended)
	}
	sb, err := cl.GetSandbox(ctx, t.Claim.Name, t.Namespace)
	if err != nil {
		return nil, fmt.Errorf("connecting to sandbox %s/%s: %w", t.Namespace, t.Name(), err)
	}
	return sb, nil
}

package cli

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// defaultReadyTimeout bounds how long exec and cp wait for a sandbox that
// is still starting.
const defaultReadyTimeout = time.Minute

// attachReady resolves name and connects to its sandbox, first waiting
// up to timeout for it to become Ready if it is still starting (a fresh
// claim, a resuming Sandbox). The caller Disconnects the handle.
func attachReady(ctx context.Context, s *session, rep *reporter, prog, name string, timeout time.Duration) (*sandbox.Sandbox, *remote.Target, error) {
	t, err := remote.Resolve(ctx, s.kube(), s.namespace, name)
	if err != nil {
		return nil, nil, err
	}
	if t.Claim == nil {
		return nil, nil, fmt.Errorf("sandbox %s/%s: %w", t.Namespace, t.Name(), remote.ErrNoClaim)
	}
	if t.Sandbox != nil && t.Sandbox.IsSuspended() {
		return nil, nil, withFix(fmt.Errorf("sandbox %s/%s: %w", t.Namespace, t.Name(), remote.ErrSuspended),
			fmt.Sprintf("resume it with `%s resume %s --wait`", prog, t.Name()))
	}
	if !remote.IsReady(t.Sandbox) {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		done := rep.wait("waiting for sandbox %s to become Ready", t.Name())
		_, err := remote.WaitClaimReady(wctx, s.kube(), t.Namespace, t.Claim.Name, nil)
		done()
		if err != nil {
			return nil, nil, waitError(ctx, wctx, err, t, timeout, prog)
		}
	}
	cl, err := s.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	sb, err := remote.Attach(ctx, cl, t)
	if err != nil {
		return nil, nil, err
	}
	return sb, t, nil
}

// disconnect drops the connection to a sandbox without deleting it.
func disconnect(sb *sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sb.Disconnect(ctx)
}

package cli

import (
	"context"
	"fmt"
	"time"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// defaultReadyTimeout bounds how long exec and cp wait for a sandbox that
// is still starting.
const defaultReadyTimeout = time.Minute

// attachReady resolves name and connects to its sandbox: through its claim
// when it has one, else to the Sandbox itself. A suspended sandbox is
// resumed first (the router would resume it on the first request anyway;
// doing it here lets the wait report progress), and a sandbox that is
// still starting is waited for, up to timeout. The caller Disconnects the
// handle.
func attachReady(ctx context.Context, s *session, rep *reporter, prog, name string, timeout time.Duration) (*sandbox.Sandbox, *remote.Target, error) {
	t, err := remote.Resolve(ctx, s.kube(), s.namespace, name)
	if err != nil {
		return nil, nil, err
	}
	if t.Claim == nil {
		if kind, pool := remote.Owner(t.Sandbox); remote.IsWarmPoolKind(kind) {
			return nil, nil, withFix(fmt.Errorf("sandbox %s/%s of warm pool %s: %w", t.Namespace, t.Sandbox.Name, pool, remote.ErrWarmMember),
				fmt.Sprintf("claim a sandbox of your own with `%s create --pool %s --wait`", prog, pool))
		}
	}
	if t.Sandbox != nil && t.Sandbox.IsSuspended() {
		if err := remote.SetOperatingMode(ctx, s.kube(), t.Namespace, t.Sandbox.Name, sandboxv1beta1.OperatingModeRunning); err != nil {
			return nil, nil, err
		}
		rep.step("sandbox %s was suspended: resuming it", t.Name())
	}
	if !remote.IsReady(t.Sandbox) || t.Sandbox.IsSuspended() {
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		done := rep.wait("waiting for sandbox %s to become Ready", t.Name())
		var sb *sandboxv1beta1.Sandbox
		watch := newProblemWatch(rep, t.Name())
		if t.Claim != nil {
			sb, err = remote.WaitClaimReadyProgress(wctx, s.kube(), t.Namespace, t.Claim.Name, nil, watch.observe)
		} else {
			sb, err = remote.WaitSandboxReadyProgress(wctx, s.kube(), t.Namespace, t.Sandbox.Name, watch.observe)
		}
		done()
		if err != nil {
			return nil, nil, watch.explain(waitError(ctx, wctx, err, t, timeout, prog))
		}
		t.Sandbox = sb
	}
	cl, err := s.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	sb, err := remote.Attach(ctx, cl, t)
	if err != nil {
		if rerr := reachError(err, s.flags, t.Name(), prog); rerr != nil {
			return nil, nil, rerr
		}
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

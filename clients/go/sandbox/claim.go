package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Open provisions and connects the sandbox: it creates a SandboxClaim on
// Options.WarmPoolName, waits (by watching, bounded by
// SandboxReadyTimeout) for the claim to be bound and the Sandbox to be
// Ready, and connects. On failure after the claim was created, the claim
// is deleted again. On a handle that still holds its claim (after
// Disconnect or a dead tunnel), Open re-attaches to the same sandbox.
func (s *Sandbox) Open(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctxError(ctx, "open", nil)
	}
	defer func() { <-s.sem }()

	s.mu.Lock()
	if s.conn != nil {
		s.mu.Unlock()
		return ErrAlreadyOpen
	}
	octx, cancel := context.WithCancel(ctx)
	s.openCancel = cancel
	claim, name := s.claimName, s.sandboxName
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.openCancel = nil
		s.mu.Unlock()
		cancel()
	}()

	switch {
	case s.claimless:
		return s.attach(octx)
	case claim != "" && name == "":
		return fmt.Errorf("sandbox: claim %s/%s could not be deleted earlier; Close retries the deletion: %w",
			s.opts.Namespace, claim, ErrOrphanedClaim)
	case claim != "":
		return s.reconnect(octx)
	}
	return s.create(octx)
}

// attach is Open for a claimless handle: the Sandbox must exist, be owned
// by no claim and no warm pool, and become Ready.
func (s *Sandbox) attach(ctx context.Context) (err error) {
	ctx = s.startLifecycle(ctx)
	ctx, span := s.tracer.Start(ctx, s.svc+".attach")
	defer func() {
		recordErr(span, err)
		span.End()
		if err != nil {
			s.endLifecycle(err)
		}
	}()
	name := s.SandboxName()
	key := types.NamespacedName{Namespace: s.opts.Namespace, Name: name}
	var sb sandboxv1beta1.Sandbox
	if err := s.helper.AgentsClient.Get(ctx, key, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("sandbox: sandbox %s: %w", key, ErrNotFound)
		}
		return fmt.Errorf("sandbox: getting sandbox %s: %w", key, err)
	}
	if ref := metav1.GetControllerOfNoCopy(&sb); ref != nil {
		switch ref.Kind {
		case "SandboxClaim":
			return fmt.Errorf("sandbox: sandbox %s belongs to claim %s; attach through the claim (Client.GetSandbox) instead", key, ref.Name)
		case "SandboxWarmPool":
			return fmt.Errorf("sandbox: sandbox %s is an unclaimed member of warm pool %s; claim one from the pool (CreateSandbox) instead", key, ref.Name)
		}
	}
	ready := &sb
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady) {
		wctx, cancel := context.WithTimeout(ctx, s.opts.SandboxReadyTimeout)
		defer cancel()
		if ready, err = s.helper.waitSandboxReady(wctx, s.opts.Namespace, name); err != nil {
			return err
		}
	}
	return s.connectAndInstall(ctx, stateOf(ready))
}

// startLifecycle starts the span that parents the handle's operations.
func (s *Sandbox) startLifecycle(ctx context.Context) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lifecycleSpan == nil {
		_, s.lifecycleSpan = s.tracer.Start(ctx, s.svc+".lifecycle")
	}
	return trace.ContextWithSpan(ctx, s.lifecycleSpan)
}

func (s *Sandbox) endLifecycle(err error) {
	s.mu.Lock()
	span := s.lifecycleSpan
	s.lifecycleSpan = nil
	s.mu.Unlock()
	if span != nil {
		recordErr(span, err)
		span.End()
	}
}

// create is Open's provisioning path. Everything that does not depend on
// which Sandbox the claim gets runs alongside the claim: the transport of
// modes that reach the sandbox through the router (tunnel, Gateway, URL)
// is set up from the start, and a watch on the Sandboxes labelled with the
// claim's UID starts as soon as the claim exists, so that the Sandbox is
// usually known and Ready by the time the claim's status names it.
func (s *Sandbox) create(ctx context.Context) (err error) {
	if err := validateWarmPoolName(s.opts.WarmPoolName); err != nil {
		return err
	}
	ctx = s.startLifecycle(ctx)
	defer func() {
		if err != nil {
			s.endLifecycle(err)
		}
	}()

	// One budget for the claim and both waits: the caller asked for a
	// Ready sandbox within SandboxReadyTimeout, however the time splits. A
	// failing early transport ends the waits at once.
	wctx, cancelWait := context.WithCancelCause(ctx)
	defer cancelWait(nil)
	wctx, cancelTimeout := context.WithTimeout(wctx, s.opts.SandboxReadyTimeout)
	defer cancelTimeout()
	early := s.dialEarly(ctx, cancelWait)
	defer func() {
		if err != nil {
			early.discard()
		}
	}()

	cctx, span := s.tracer.Start(ctx, s.svc+".create_claim")
	claim := buildClaim(cctx, s.opts.Namespace, s.opts.WarmPoolName, s.presetAnnotations, time.Now())
	for _, e := range s.opts.Env {
		claim.Spec.Env = append(claim.Spec.Env, extv1beta1.EnvVar{Name: e.Name, Value: e.Value})
	}
	err = s.helper.ExtensionsClient.Create(cctx, claim)
	recordErr(span, err)
	span.End()
	if err != nil {
		return fmt.Errorf("sandbox: creating claim on warm pool %s/%s: %w: %w", s.opts.Namespace, s.opts.WarmPoolName, ErrClaimFailed, err)
	}
	s.mu.Lock()
	s.claimName = claim.Name
	s.mu.Unlock()
	s.opts.Logger.V(1).Info("sandbox claim created", "claim", claim.Name, "namespace", s.opts.Namespace)
	pw := s.helper.startSandboxPrewatch(wctx, s.opts.Namespace, claim.UID)

	// waitErr prefers the early transport's failure, which cut the wait
	// short, over the wait's own error.
	waitErr := func(err error) error {
		if err != nil && early.failed() {
			return early.err
		}
		return err
	}
	rctx, span := s.tracer.Start(wctx, s.svc+".resolve_sandbox_name", trace.WithAttributes(attribute.String(attrClaimName, claim.Name)))
	name, err := s.helper.resolveSandboxName(rctx, s.opts.Namespace, claim.Name, claim)
	err = waitErr(err)
	recordErr(span, err)
	span.End()
	if err != nil {
		return s.rollback(ctx, nil, err)
	}
	s.mu.Lock()
	s.sandboxName = name
	s.mu.Unlock()

	rctx, span = s.tracer.Start(wctx, s.svc+".wait_for_sandbox_ready")
	sb, err := s.helper.waitClaimedSandboxReady(rctx, s.opts.Namespace, name, pw)
	err = waitErr(err)
	recordErr(span, err)
	span.End()
	if err != nil {
		return s.rollback(ctx, nil, err)
	}
	st := stateOf(sb)
	var conn *connection
	if early != nil {
		conn, err = early.connection(s, st)
	} else {
		conn, err = s.connect(ctx, st)
	}
	if err != nil {
		return s.rollback(ctx, conn, err)
	}
	s.install(conn, st)
	return nil
}

// earlyDial is a transport being set up while the claim is bound.
type earlyDial struct {
	cancel context.CancelFunc
	done   chan struct{}
	cs     ConnectionStrategy
	base   string
	err    error
}

// dialEarly starts the transport now if the mode does not need to know
// the sandbox (everything but the pod tunnel and in-cluster modes), and
// returns nil otherwise. A failure cancels the claim waits through
// cancelWait, with the failure as the cause.
func (s *Sandbox) dialEarly(ctx context.Context, cancelWait context.CancelCauseFunc) *earlyDial {
	if s.mode.needsSandbox() {
		return nil
	}
	dctx, cancel := context.WithCancel(ctx)
	e := &earlyDial{cancel: cancel, done: make(chan struct{})}
	go func() {
		e.cs, e.base, e.err = s.dial(dctx)
		close(e.done) // before cancelWait, so failed() sees the error
		if e.err != nil {
			cancelWait(e.err)
		}
	}()
	return e
}

// connection waits for the early transport and completes it for st.
func (e *earlyDial) connection(s *Sandbox, st sandboxState) (*connection, error) {
	<-e.done
	e.cancel()
	if e.err != nil {
		return nil, e.err
	}
	return s.assemble(e.cs, e.base, st)
}

// failed reports whether the early transport has failed already.
func (e *earlyDial) failed() bool {
	if e == nil {
		return false
	}
	select {
	case <-e.done:
		return e.err != nil
	default:
		return false
	}
}

// discard stops and closes the early transport of a failed Open.
func (e *earlyDial) discard() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
	if e.err == nil && e.cs != nil {
		_ = e.cs.Close()
	}
}

// rollback undoes a failed Open: closes the transport and deletes the
// claim on a context detached from the (possibly cancelled) caller's. If
// the deletion fails, the claim name is kept so Close can retry, and Open
// reports ErrOrphanedClaim until then.
func (s *Sandbox) rollback(ctx context.Context, conn *connection, cause error) error {
	if conn != nil {
		conn.close()
	}
	s.mu.Lock()
	claim := s.claimName
	s.mu.Unlock()
	if claim == "" {
		return cause
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.CleanupTimeout)
	defer cancel()
	if err := s.helper.deleteClaim(dctx, s.opts.Namespace, claim); err != nil {
		s.mu.Lock()
		s.sandboxName = ""
		s.mu.Unlock()
		return errors.Join(cause, fmt.Errorf("rolling back: %w; Close retries the deletion (%w)", err, ErrOrphanedClaim))
	}
	s.clearIdentity()
	return cause
}

func (s *Sandbox) clearIdentity() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimName, s.sandboxName, s.state = "", "", sandboxState{}
}

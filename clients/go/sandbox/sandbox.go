package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Sandbox is a handle on one claimed sandbox. Create it with New (or
// Client.CreateSandbox), then Open it. All methods are safe for concurrent
// use; Open, Close and Disconnect are serialized.
type Sandbox struct {
	opts   Options
	mode   mode
	helper *K8sHelper
	tracer trace.Tracer
	svc    string // span name prefix

	// sem serializes Open, Close and Disconnect.
	sem chan struct{}

	mu            sync.Mutex
	claimName     string
	sandboxName   string
	state         sandboxState
	conn          *connection
	lastConnErr   error // why the last connection died, for ErrNotReady
	openCancel    context.CancelFunc
	lifecycleSpan trace.Span
	// presetAnnotations are put on the claim Open creates.
	presetAnnotations map[string]string
	// claimless: the handle is attached to a Sandbox no claim owns (see
	// Attach); Open re-attaches to it and Close leaves it alone.
	claimless bool
}

// connection is one connected transport; a reconnect makes a new one.
type connection struct {
	strategy ConnectionStrategy
	ep       endpoint
	http     *connector
	grpc     *grpc.ClientConn
	ops      sync.WaitGroup // in-flight operations
	// sharedHTTP: the HTTP transport is the helper's, shared with other
	// handles, and keeps its idle connections.
	sharedHTTP bool
	closeOnce  sync.Once
	closed     chan struct{} // closed by close
}

func (c *connection) close() {
	c.closeOnce.Do(func() {
		if c.closed != nil {
			close(c.closed)
		}
		if c.grpc != nil {
			_ = c.grpc.Close()
		}
		_ = c.strategy.Close()
		if c.sharedHTTP {
			return
		}
		if t, ok := c.http.client.Transport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	})
}

// New validates opts and returns an unopened handle. It does not touch the
// cluster, except to load the Kubernetes client configuration when neither
// K8sHelper nor RestConfig is given.
func New(ctx context.Context, opts Options) (*Sandbox, error) {
	_ = ctx // reserved: client construction does no I/O today
	o, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	h := o.K8sHelper
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Sandbox{
		opts:   o,
		mode:   o.selectMode(),
		helper: h,
		tracer: tp.Tracer(strings.ReplaceAll(o.TraceServiceName, "-", "_")),
		svc:    o.TraceServiceName,
		sem:    make(chan struct{}, 1),
	}, nil
}

// newAttached returns a handle on an existing claim, for Client.GetSandbox:
// Open takes the reconnect path.
func newAttached(ctx context.Context, opts Options, claim, sandboxName string) (*Sandbox, error) {
	s, err := New(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.claimName, s.sandboxName = claim, sandboxName
	return s, nil
}

// Attach returns a handle connected to an existing Sandbox that no claim
// owns: one created directly (with kubectl, `agent-sandbox create` or a
// controller of the caller's) rather than claimed from a warm pool. It
// waits, by watching and for up to SandboxReadyTimeout, until the Sandbox
// is Ready. The handle does not own the Sandbox: Close only disconnects,
// and the Sandbox stays. A Sandbox owned by a claim is refused (attach
// through the claim with Client.GetSandbox), and so is an unclaimed warm
// pool member (claim one with Open or Client.CreateSandbox). A missing
// Sandbox is an error matching ErrNotFound. opts.WarmPoolName is not
// needed. Extension over the published SDK.
func Attach(ctx context.Context, opts Options, sandboxName string) (*Sandbox, error) {
	if len(validation.IsDNS1123Subdomain(sandboxName)) > 0 {
		return nil, fmt.Errorf("sandbox: %q is not a valid Sandbox name (DNS subdomain)", sandboxName)
	}
	s, err := New(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.sandboxName, s.claimless = sandboxName, true
	if err := s.Open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// ClaimName is the SandboxClaim's name ("" before Open).
func (s *Sandbox) ClaimName() string { s.mu.Lock(); defer s.mu.Unlock(); return s.claimName }

// SandboxName is the bound Sandbox's name, the router's X-Sandbox-ID.
func (s *Sandbox) SandboxName() string { s.mu.Lock(); defer s.mu.Unlock(); return s.sandboxName }

// PodName is the sandbox Pod's name.
func (s *Sandbox) PodName() string { s.mu.Lock(); defer s.mu.Unlock(); return s.state.podName }

// PodIP is the sandbox Pod's IP (IPv4 preferred), "" when unknown.
func (s *Sandbox) PodIP() string { s.mu.Lock(); defer s.mu.Unlock(); return s.state.podIP }

// Annotations returns a copy of the Sandbox's annotations.
func (s *Sandbox) Annotations() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.state.annotations)
}

// Namespace is the claim's namespace.
func (s *Sandbox) Namespace() string { return s.opts.Namespace }

// IsReady reports whether the handle is connected.
func (s *Sandbox) IsReady() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.conn != nil }

// Commands groups the command operations.
func (s *Sandbox) Commands() *Commands { return &Commands{s: s} }

// Files groups the file operations.
func (s *Sandbox) Files() *Files { return &Files{s: s} }

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
	strat  ConnectionStrategy
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
		e.strat, e.base, e.err = s.dial(dctx)
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
	return s.assemble(e.strat, e.base, st)
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
	if e.err == nil && e.strat != nil {
		_ = e.strat.Close()
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

// reconnect re-attaches to the handle's claim: the claim must still exist
// and its Sandbox must be Ready.
func (s *Sandbox) reconnect(ctx context.Context) (err error) {
	ctx = s.startLifecycle(ctx)
	ctx, span := s.tracer.Start(ctx, s.svc+".reconnect")
	defer func() {
		recordErr(span, err)
		span.End()
		if err != nil {
			s.endLifecycle(err)
		}
	}()
	s.mu.Lock()
	claimName, name := s.claimName, s.sandboxName
	s.mu.Unlock()

	vctx, vspan := s.tracer.Start(ctx, s.svc+".verify_claim_exists")
	var claim extv1beta1.SandboxClaim
	err = s.helper.ExtensionsClient.Get(vctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: claimName}, &claim)
	recordErr(vspan, err)
	vspan.End()
	switch {
	case apierrors.IsNotFound(err):
		s.clearIdentity()
		return fmt.Errorf("sandbox: claim %s/%s: %w", s.opts.Namespace, claimName, ErrSandboxDeleted)
	case err != nil:
		return fmt.Errorf("sandbox: claim %s/%s cannot be read (%w); Open again to retry, or Close to delete it: %w",
			s.opts.Namespace, claimName, err, ErrOrphanedClaim)
	}
	if n := claim.Status.SandboxStatus.Name; n != "" && n != name {
		name = n
		s.mu.Lock()
		s.sandboxName = n
		s.mu.Unlock()
	}

	vctx, vspan = s.tracer.Start(ctx, s.svc+".verify_sandbox_alive")
	var sb sandboxv1beta1.Sandbox
	err = s.helper.AgentsClient.Get(vctx, types.NamespacedName{Namespace: s.opts.Namespace, Name: name}, &sb)
	recordErr(vspan, err)
	vspan.End()
	if err != nil {
		return fmt.Errorf("sandbox: claim %s/%s names sandbox %s, which cannot be read (%w); Close deletes the claim: %w",
			s.opts.Namespace, claimName, name, err, ErrOrphanedClaim)
	}
	if !meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady) {
		return fmt.Errorf("sandbox: claim %s/%s is bound to sandbox %s, which is not Ready (%s); Open again once it is, or Close to delete the claim: %w",
			s.opts.Namespace, claimName, name, conditionsString(sb.Status.Conditions), ErrOrphanedClaim)
	}
	// On a connection error the claim is fine; the caller may Open again.
	return s.connectAndInstall(ctx, stateOf(&sb))
}

// connectAndInstall connects to the sandbox st describes and makes that
// connection the handle's; a failed attempt leaves nothing open.
func (s *Sandbox) connectAndInstall(ctx context.Context, st sandboxState) error {
	conn, err := s.connect(ctx, st)
	if err != nil {
		if conn != nil {
			conn.close()
		}
		return err
	}
	s.install(conn, st)
	return nil
}

// install makes conn the handle's connection and watches it if it can die.
func (s *Sandbox) install(conn *connection, st sandboxState) {
	s.mu.Lock()
	s.conn, s.state, s.lastConnErr = conn, st, nil
	s.mu.Unlock()
	m, ok := conn.strategy.(monitored)
	if !ok {
		return
	}
	go func() {
		select {
		case <-m.Done():
		case <-conn.closed:
			// Closed on purpose; a shared tunnel lives on without it.
			return
		}
		s.mu.Lock()
		// A monitor of a connection that was already replaced or closed
		// on purpose has nothing to say.
		if s.conn != conn {
			s.mu.Unlock()
			return
		}
		s.conn = nil
		s.lastConnErr = m.Err()
		s.mu.Unlock()
		s.opts.Logger.Info("sandbox connection lost; Open the handle again to reconnect",
			"claim", s.ClaimName(), "error", m.Err().Error())
		conn.close()
	}()
}

// newStrategy returns the connection strategy of the handle's mode.
func (s *Sandbox) newStrategy(st sandboxState) ConnectionStrategy {
	o := &s.opts
	switch s.mode {
	case modeDirect:
		return &DirectStrategy{URL: o.APIURL}
	case modeGateway:
		return &gatewayStrategy{h: s.helper, name: o.GatewayName, namespace: o.GatewayNamespace,
			scheme: o.GatewayScheme, timeout: o.GatewayReadyTimeout, log: o.Logger}
	case modePodTunnel:
		return &podTunnelStrategy{h: s.helper, namespace: o.Namespace, pod: st.podName,
			restPort: o.SandboxdRESTPort, grpcPort: o.SandboxdGRPCPort, timeout: o.PortForwardReadyTimeout}
	case modeInCluster:
		port := o.ServerPort
		if o.Runtime == RuntimeSandboxd {
			port = o.SandboxdRESTPort
		}
		return &inClusterStrategy{podIP: st.podIP, port: port, grpcPort: o.SandboxdGRPCPort}
	}
	return &routerTunnelStrategy{h: s.helper, namespaces: routerNamespaces(o), timeout: o.PortForwardReadyTimeout, log: o.Logger}
}

// spanName of each mode's connect step.
func (m mode) spanSuffix() string {
	switch m {
	case modeGateway:
		return ".wait_for_gateway"
	case modePodTunnel:
		return ".sandboxd_pod_tunnel"
	case modeRouterTunnel:
		return ".dev_mode_tunnel"
	}
	return ".connect"
}

// needsSandbox reports whether the mode's transport depends on which
// sandbox it reaches (its Pod), so it cannot be set up before the claim is
// bound.
func (m mode) needsSandbox() bool { return m == modePodTunnel || m == modeInCluster }

// connect establishes a connection to the sandbox described by st. On
// error the returned connection (if any) must be closed by the caller.
func (s *Sandbox) connect(ctx context.Context, st sandboxState) (*connection, error) {
	strat, base, err := s.dialFor(ctx, st)
	if err != nil {
		return nil, err
	}
	return s.assemble(strat, base, st)
}

// dial sets up the transport of a mode that does not need the sandbox.
func (s *Sandbox) dial(ctx context.Context) (ConnectionStrategy, string, error) {
	return s.dialFor(ctx, sandboxState{})
}

// dialFor runs the strategy's Connect under the mode's span; on error the
// strategy is closed.
func (s *Sandbox) dialFor(ctx context.Context, st sandboxState) (ConnectionStrategy, string, error) {
	o := &s.opts
	strat := s.newStrategy(st)
	cctx, span := s.tracer.Start(ctx, s.svc+s.mode.spanSuffix())
	if s.mode == modeGateway {
		span.SetAttributes(attribute.String(attrGatewayName, o.GatewayName), attribute.String(attrGatewayNamespace, o.GatewayNamespace))
	}
	base, err := strat.Connect(cctx)
	recordErr(span, err)
	span.End()
	if err != nil {
		_ = strat.Close()
		return nil, "", err
	}
	return strat, base, nil
}

// assemble builds the connection to the sandbox st over a connected
// strategy. On error the returned connection must be closed by the caller.
func (s *Sandbox) assemble(strat ConnectionStrategy, base string, st sandboxState) (*connection, error) {
	o := &s.opts
	ep := endpoint{baseURL: base, port: o.ServerPort, grpcPort: o.SandboxdGRPCPort}
	if o.Runtime == RuntimeSandboxd {
		ep.port = o.SandboxdRESTPort
	}
	switch s.mode {
	case modeDirect, modeGateway, modeRouterTunnel:
		// Through the router: REST with routing headers, gRPC over h2c
		// (or TLS) to the same address with routing metadata.
		ep.routerHeaders = true
		u, perr := url.Parse(base)
		if perr == nil && u.Host != "" {
			ep.grpcTarget, ep.grpcRouted, ep.grpcTLS = hostPort(u), true, u.Scheme == "https"
		}
	default:
		if gt, ok := strat.(grpcTargeter); ok {
			ep.grpcTarget = gt.GRPCTarget()
		}
	}
	// Requests through the router share the helper's transport, so a new
	// handle reuses the connections of earlier ones.
	rt := o.HTTPTransport
	shared := rt == nil && ep.routerHeaders
	if shared {
		rt = s.helper.sharedTransport(o.PerAttemptTimeout)
	}
	conn := &connection{
		strategy:   strat,
		ep:         ep,
		sharedHTTP: shared,
		closed:     make(chan struct{}),
		http: &connector{
			client:        newHTTPClient(rt, o.PerAttemptTimeout),
			baseURL:       base,
			routerHeaders: ep.routerHeaders,
			port:          ep.port,
			ident:         identity{sandboxName: s.SandboxName(), namespace: o.Namespace, podIP: st.podIP},
			perAttempt:    o.PerAttemptTimeout,
			log:           o.Logger,
			backoffBase:   500 * time.Millisecond,
		},
	}
	if ep.grpcTarget != "" {
		gc, err := dialGRPC(ep)
		if err != nil {
			return conn, err
		}
		conn.grpc = gc
	}
	return conn, nil
}

// Close releases the sandbox: it cancels an Open in progress, stops new
// operations (they fail with ErrNotReady), lets in-flight ones finish for
// up to half of CleanupTimeout, closes the transport and deletes the claim
// (which deletes the Sandbox and its Pod). Cleanup runs on a context
// detached from ctx, bounded by CleanupTimeout, so Close works even with a
// cancelled ctx. If the deletion fails, the handle keeps the claim and a
// later Close retries. Closing a closed handle is a no-op.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.openCancel != nil {
		s.openCancel()
	}
	s.mu.Unlock()
	detached := context.WithoutCancel(ctx)
	semCtx, cancel := context.WithTimeout(detached, 2*s.opts.CleanupTimeout)
	defer cancel()
	select {
	case s.sem <- struct{}{}:
	case <-semCtx.Done():
		return fmt.Errorf("sandbox: close: waiting for a concurrent Open or Close: %w", ErrTimeout)
	}
	defer func() { <-s.sem }()

	start := time.Now()
	s.detach(s.opts.CleanupTimeout / 2)
	if s.claimless {
		// Not ours to delete.
		s.endLifecycle(nil)
		return nil
	}
	s.mu.Lock()
	claim := s.claimName
	s.mu.Unlock()
	if claim == "" {
		s.endLifecycle(nil)
		return nil
	}
	dctx, dcancel := context.WithTimeout(detached, max(s.opts.CleanupTimeout-time.Since(start), time.Second))
	defer dcancel()
	if err := s.helper.deleteClaim(dctx, s.opts.Namespace, claim); err != nil {
		s.mu.Lock()
		s.sandboxName = ""
		s.mu.Unlock()
		s.endLifecycle(err)
		return err
	}
	s.clearIdentity()
	s.endLifecycle(nil)
	return nil
}

// Disconnect closes the connection but keeps the claim: Open reconnects
// to the same sandbox later.
func (s *Sandbox) Disconnect(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctxError(ctx, "disconnect", nil)
	}
	defer func() { <-s.sem }()
	s.detach(s.opts.CleanupTimeout / 2)
	s.endLifecycle(nil)
	return nil
}

// detach stops new operations on the current connection, waits up to
// drain for in-flight ones, and closes it.
func (s *Sandbox) detach(drain time.Duration) {
	s.mu.Lock()
	conn := s.conn
	s.conn, s.lastConnErr = nil, nil
	s.mu.Unlock()
	if conn == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		conn.ops.Wait()
		close(done)
	}()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.opts.Logger.Info("closing the sandbox connection with operations still in flight", "claim", s.ClaimName())
	}
	conn.close()
}

// acquire returns the connection for one operation; release must be
// called when the operation is done with it.
func (s *Sandbox) acquire(op string) (*connection, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conn
	if c == nil {
		if s.lastConnErr != nil {
			return nil, nil, fmt.Errorf("sandbox: %s: %w: %w", op, ErrNotReady, s.lastConnErr)
		}
		return nil, nil, fmt.Errorf("sandbox: %s: %w", op, ErrNotReady)
	}
	c.ops.Add(1)
	return c, c.ops.Done, nil
}

// startOp opens an operation span under the lifecycle span (unless the
// caller's context carries its own span).
func (s *Sandbox) startOp(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		s.mu.Lock()
		ls := s.lifecycleSpan
		s.mu.Unlock()
		if ls != nil {
			ctx = trace.ContextWithSpan(ctx, ls)
		}
	}
	return s.tracer.Start(ctx, s.svc+"."+op, trace.WithAttributes(attrs...))
}

func recordErr(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

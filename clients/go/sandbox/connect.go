package sandbox

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

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
	cs, base, err := s.dialFor(ctx, st)
	if err != nil {
		return nil, err
	}
	return s.assemble(cs, base, st)
}

// dial sets up the transport of a mode that does not need the sandbox.
func (s *Sandbox) dial(ctx context.Context) (ConnectionStrategy, string, error) {
	return s.dialFor(ctx, sandboxState{})
}

// dialFor runs the strategy's Connect under the mode's span; on error the
// strategy is closed.
func (s *Sandbox) dialFor(ctx context.Context, st sandboxState) (ConnectionStrategy, string, error) {
	o := &s.opts
	cs := s.newStrategy(st)
	cctx, span := s.tracer.Start(ctx, s.svc+s.mode.spanSuffix())
	if s.mode == modeGateway {
		span.SetAttributes(attribute.String(attrGatewayName, o.GatewayName), attribute.String(attrGatewayNamespace, o.GatewayNamespace))
	}
	base, err := cs.Connect(cctx)
	recordErr(span, err)
	span.End()
	if err != nil {
		_ = cs.Close()
		return nil, "", err
	}
	return cs, base, nil
}

// assemble builds the connection to the sandbox st over a connected
// strategy. On error the returned connection must be closed by the caller.
func (s *Sandbox) assemble(cs ConnectionStrategy, base string, st sandboxState) (*connection, error) {
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
		if gt, ok := cs.(grpcTargeter); ok {
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
		strategy:   cs,
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

package sandbox

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/validation"
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

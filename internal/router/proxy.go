package router

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/propagation"
)

// reqState travels in the request context from the outer middleware to the
// proxy's Rewrite and ErrorHandler hooks. One allocation per request.
type reqState struct {
	nsLabel string // metrics label: "-" until the namespace is known to exist
	rawID   string // raw header values, for logs and spans
	rawNS   string
	target  Target
	useH2C  bool
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return st
	}
	return &reqState{nsLabel: unparsedNamespace}
}

func namespaceLabel(ctx context.Context) string { return stateFrom(ctx).nsLabel }

// ProxyHandler validates, authorizes, resolves and forwards one request.
type ProxyHandler struct {
	allowLoopback bool
	authz         Authorizer
	res           *resolution
	idle          *IdleTracker
	metrics       *Metrics
	proxyTimeout  time.Duration
	propagator    propagation.TextMapPropagator // nil when tracing is off
	log           logr.Logger

	// reduced: no cache (no list/watch rights or --cache-enabled=false).
	// Targets come from the headers as in the reference without its cache:
	// X-Sandbox-Pod-IP after the address-class checks, else the DNS name
	// <id>.<namespace>.svc.<clusterDomain>.
	reduced       bool
	clusterDomain string

	rp *httputil.ReverseProxy
	// dialer dials raw TCP tunnels; it applies the same address policy
	// and retries as the proxy's transports.
	dialer *retryDialer
	active sync.WaitGroup
	// synced is false until the cache holds the initial LIST: before that a
	// "not found" would be a lie.
	synced atomic.Bool
}

// MarkSynced tells the handler the resolver's cache is complete.
func (h *ProxyHandler) MarkSynced() { h.synced.Store(true) }

// ProxyOptions configures NewProxyHandler.
type ProxyOptions struct {
	AllowLoopback bool
	Authorizer    Authorizer
	Resolver      Resolver
	Policy        *AddrPolicy
	// AlwaysAllowedPorts are reachable on every sandbox in addition to the
	// ports its pod template declares.
	AlwaysAllowedPorts []uint16
	Resumer            *Resumer // nil disables auto-resume
	Idle               *IdleTracker
	Metrics            *Metrics
	ProxyTimeout       time.Duration
	// ReadyTimeout bounds how long a request is held for a sandbox that is
	// resuming or starting.
	ReadyTimeout time.Duration
	// Unsynced makes the handler answer 503 until MarkSynced is called
	// (informer-backed resolvers); otherwise the resolver is trusted as is.
	Unsynced bool
	// Reduced selects the reduced mode (see ProxyHandler.reduced);
	// ClusterDomain names the DNS form of its targets.
	Reduced       bool
	ClusterDomain string
	Transport     TransportOptions
	Propagator    propagation.TextMapPropagator
	Log           logr.Logger
}

// NewProxyHandler builds the proxy handler and its upstream transports.
func NewProxyHandler(o ProxyOptions) *ProxyHandler {
	h := &ProxyHandler{
		allowLoopback: o.AllowLoopback,
		authz:         o.Authorizer,
		res: &resolution{
			resolver:      o.Resolver,
			policy:        o.Policy,
			alwaysPorts:   o.AlwaysAllowedPorts,
			resumer:       o.Resumer,
			waitTimeout:   o.ReadyTimeout,
			notFoundGrace: min(cacheLagGrace, o.ReadyTimeout),
		},
		idle:          o.Idle,
		metrics:       o.Metrics,
		proxyTimeout:  o.ProxyTimeout,
		propagator:    o.Propagator,
		log:           o.Log,
		reduced:       o.Reduced,
		clusterDomain: o.ClusterDomain,
	}
	if h.authz == nil {
		h.authz = AllowAll{}
	}
	h.synced.Store(!o.Unsynced)
	h1, h2c := newUpstreamTransports(o.Transport, o.Policy, o.Metrics)
	h.dialer = newRetryDialer(o.Transport.MaxRetries, o.Transport.RetryInitialDelay, o.Transport.RetryMaxDelay, o.Policy, o.Metrics)
	h.rp = &httputil.ReverseProxy{
		Rewrite: h.rewrite,
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if stateFrom(r.Context()).useH2C {
				return h2c.RoundTrip(r)
			}
			return h1.RoundTrip(r)
		}),
		// Flush every write: SSE, progress streams and interactive output
		// must reach the client as soon as the sandbox produces them.
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			if stateFrom(res.Request.Context()).useH2C {
				trailersOnlyToTrailers(res)
			}
			return nil
		},
		BufferPool:   bufferPool{},
		ErrorHandler: h.proxyError,
		ErrorLog:     nil,
	}
	return h
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// ServeHTTP implements http.Handler.
func (h *ProxyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st := stateFrom(ctx)
	route, herr := ParseRoute(r.Header, h.allowLoopback)
	if herr != nil {
		writeDetail(w, herr.Code, herr.Detail)
		return
	}
	if !h.synced.Load() {
		writeDetail(w, http.StatusServiceUnavailable, "Router cache is not synced yet.")
		return
	}
	if h.res.resolver.KnownNamespace(route.Namespace) {
		st.nsLabel = route.Namespace
	}

	if err := h.authz.Authorize(ctx, r, route.Namespace, route.ID); err != nil {
		h.metrics.authz(st.nsLabel, false)
		writeDetail(w, authzStatus(err), err.Error())
		return
	}
	h.metrics.authz(st.nsLabel, true)

	var target Target
	if h.reduced {
		target, herr = h.reducedTarget(route)
	} else {
		start := time.Now()
		var held bool
		target, held, herr = h.res.resolve(ctx, route)
		if held {
			h.metrics.hold(st.nsLabel, herr == nil, time.Since(start).Seconds())
		}
	}
	if herr != nil {
		writeDetail(w, herr.Code, herr.Detail)
		return
	}
	st.target = target
	st.useH2C = isGRPC(r)
	h.active.Add(1)
	defer h.active.Done()

	if h.idle != nil && !h.reduced {
		done := h.idle.Begin(route.Key())
		defer done()
	}
	if isTunnel(r) {
		// Raw TCP: same route, authorization, resolution and idle
		// tracking as above; no proxy timeout, like any upgrade.
		h.serveTunnel(w, r)
		return
	}
	if r.ProtoMajor == 1 && !isUpgrade(r) {
		// Let the upstream's response stream back while the request body is
		// still streaming up (interactive stdin/stdout over chunked HTTP/1.1);
		// by default net/http would consume the body before the first write.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	if !isUpgrade(r) && !st.useH2C {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.proxyTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	h.rp.ServeHTTP(w, r)
}

// reducedTarget is the reduced mode's resolution: nothing is verified
// against the cluster, so the address-class policy (link-local, metadata,
// multicast, loopback, the router's own ports, ...) is the only guard, and
// the dialer applies it again to whatever the DNS name resolves to.
func (h *ProxyHandler) reducedTarget(r Route) (Target, *httpError) {
	if r.PodIP.IsValid() {
		ap := netip.AddrPortFrom(r.PodIP, r.Port)
		if !h.res.policy.Permit(ap) {
			return Target{}, errorf(http.StatusForbidden,
				fmt.Sprintf("Target address of sandbox %s is not allowed.", r.Key()))
		}
		return Target{Route: r, Addr: ap}, nil
	}
	// ID and namespace are DNS labels (ParseRoute), so no extra labels or
	// separators can be injected into the name.
	return Target{Route: r, Host: r.ID + "." + r.Namespace + ".svc." + h.clusterDomain}, nil
}

// Drain waits until every forwarded request has finished or ctx ends.
func (h *ProxyHandler) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.active.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("draining proxied requests: %w", ctx.Err())
	}
}

// rewrite builds the upstream request: fixed scheme and verified address,
// Host from that address, caller credentials removed, X-Forwarded-* set
// from what the router observed (inbound ones were already dropped by
// ReverseProxy), and Origin dropped on upgrades so that Origin-vs-Host
// checks in code-server or Jupyter do not reject proxied sockets. The path
// and query are forwarded exactly as the client escaped them.
func (h *ProxyHandler) rewrite(pr *httputil.ProxyRequest) {
	st := stateFrom(pr.In.Context())
	pr.Out.URL.Scheme = "http"
	if st.target.Host != "" {
		pr.Out.URL.Host = net.JoinHostPort(st.target.Host, strconv.Itoa(int(st.target.Route.Port)))
	} else {
		pr.Out.URL.Host = st.target.Addr.String()
	}
	pr.Out.Host = ""
	pr.Out.Header.Del("Authorization")
	pr.SetXForwarded()
	if isUpgrade(pr.In) {
		pr.Out.Header.Del("Origin")
	}
	stripLookalikes(pr.Out.Header)
	if h.propagator != nil {
		h.propagator.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
	}
}

// stripLookalikes drops headers that are not routing or credential headers
// for Go but become one for backends that fold "_" into "-" (CGI, some
// WSGI servers, nginx with underscores_in_headers), so a caller cannot hand
// the sandbox a second, unvalidated X-Sandbox-ID or Authorization.
func stripLookalikes(h http.Header) {
	for k := range h {
		if !strings.Contains(k, "_") {
			continue
		}
		n := strings.ReplaceAll(k, "_", "-")
		switch http.CanonicalHeaderKey(n) {
		case HeaderSandboxID, HeaderSandboxUID, HeaderSandboxNamespace, HeaderSandboxPort,
			HeaderSandboxPodIP, "Authorization", "X-Forwarded-For", "X-Forwarded-Host",
			"X-Forwarded-Proto", "Forwarded":
			delete(h, k)
		}
	}
}

// proxyError answers upstream failures with 502 and the upstream-compatible
// detail. Called only before response headers were sent; failures later in
// a stream abort the connection instead, which is the only honest signal.
func (h *ProxyHandler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	st := stateFrom(r.Context())
	reason := upstreamReason(err)
	h.metrics.upstreamErrors.WithLabelValues(st.nsLabel, reason).Inc()
	h.log.V(1).Info("upstream error", "sandbox_id", st.target.Route.ID,
		"sandbox_namespace", st.target.Route.Namespace, "reason", reason, "error", err.Error())
	writeDetail(w, http.StatusBadGateway, "Could not connect to the backend sandbox: "+st.target.Route.ID)
}

// bufferPool recycles the 32 KiB copy buffers of ReverseProxy so a large
// transfer costs no garbage per chunk.
type bufferPool struct{}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(copyBufs.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBufs.Put(&b) }

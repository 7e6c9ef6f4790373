package router

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// harness runs a real router (instrumented proxy + listeners on 127.0.0.1)
// in front of an Index the test feeds directly.
type harness struct {
	t        testing.TB
	idx      *Index
	policy   *AddrPolicy
	metrics  *Metrics
	proxy    *ProxyHandler
	srv      *Server
	tracker  *IdleTracker
	control  *fakeControl
	url      string
	addr     string
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

type harnessOpts struct {
	authz           Authorizer
	proxyTimeout    time.Duration
	readyTimeout    time.Duration
	maxRetries      int
	autoResume      bool
	maxBody         int64
	disallowLoop    bool
	alwaysPorts     []uint16
	shutdownTimeout time.Duration
	tracer          trace.Tracer
	propagator      propagation.TextMapPropagator
	accessLog       *logr.Logger
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.proxyTimeout == 0 {
		o.proxyTimeout = 30 * time.Second
	}
	if o.readyTimeout == 0 {
		o.readyTimeout = 5 * time.Second
	}
	if o.shutdownTimeout == 0 {
		o.shutdownTimeout = 5 * time.Second
	}
	h := &harness{t: t, idx: NewIndex(), metrics: NewMetrics(BuildInfo{}), tracker: NewIdleTracker()}
	h.policy = NewAddrPolicy(!o.disallowLoop)
	h.control = &fakeControl{idx: h.idx}
	var resumer *Resumer
	if o.autoResume {
		resumer = NewResumer(context.Background(), h.control, h.metrics, 5*time.Second, false)
	}
	h.proxy = NewProxyHandler(ProxyOptions{
		AllowLoopback:      !o.disallowLoop,
		Authorizer:         o.authz,
		Resolver:           h.idx,
		Policy:             h.policy,
		AlwaysAllowedPorts: o.alwaysPorts,
		Resumer:            resumer,
		Idle:               h.tracker,
		Metrics:            h.metrics,
		ProxyTimeout:       o.proxyTimeout,
		ReadyTimeout:       o.readyTimeout,
		Transport: TransportOptions{
			ResponseHeaderTimeout: 30 * time.Second,
			MaxRetries:            o.maxRetries,
			RetryInitialDelay:     20 * time.Millisecond,
			RetryMaxDelay:         80 * time.Millisecond,
		},
		Propagator: o.propagator,
		Log:        logr.Discard(),
	})
	h.srv = NewServer(ServerOptions{
		HTTPAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", ProbeAddr: "127.0.0.1:0",
		ShutdownTimeout: o.shutdownTimeout,
		Proxy:           h.proxy,
		Wrap: func(next http.Handler) http.Handler {
			return Instrument(next, InstrumentOptions{Metrics: h.metrics, MaxBodyBytes: o.maxBody,
				Tracer: o.tracer, Propagator: o.propagator, AccessLog: o.accessLog})
		},
		Drain:   h.proxy.Drain,
		Metrics: h.metrics,
		Log:     logr.Discard(),
	})
	if err := h.srv.Bind(); err != nil {
		t.Fatalf("bind: %v", err)
	}
	for _, n := range []string{ListenerHTTP, ListenerMetrics, ListenerProbes} {
		h.policy.AddSelfPort(uint16(h.srv.Addr(n).(*net.TCPAddr).Port))
	}
	h.addr = h.srv.Addr(ListenerHTTP).String()
	h.url = "http://" + h.addr
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	h.srv.SetReady(true)
	go func() { h.done <- h.srv.Serve(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.stopOnce.Do(func() {
		h.cancel()
		<-h.done //nolint:errcheck // shutdown; its result is not under test
	})
}

// sandboxSpec describes a fake sandbox + pod for the index.
type sandboxSpec struct {
	ns, name  string
	uid       string
	addr      netip.AddrPort // backend the pod "is"
	extraPort []uint16
	suspended bool
	notReady  bool
	warmPool  bool
	reason    string
	noResume  bool // AutoResumeAnnotation "false"
}

var uidSeq atomic.Int64

// addSandbox registers a ready sandbox whose pod address is s.addr and
// returns its UID.
func (h *harness) addSandbox(s sandboxSpec) string {
	if s.ns == "" {
		s.ns = "default"
	}
	if s.uid == "" {
		s.uid = fmt.Sprintf("sb-uid-%d", uidSeq.Add(1))
	}
	ip := s.addr.Addr().String()
	ports := append([]uint16{s.addr.Port()}, s.extraPort...)
	h.idx.UpsertSandbox(&SandboxRecord{
		Key: SandboxKey{Namespace: s.ns, Name: s.name}, UID: s.uid, ResourceVersion: "1",
		Suspended: s.suspended, Ready: !s.suspended && !s.notReady, ReadyReason: s.reason,
		PodIPs: []string{ip}, WarmPool: s.warmPool, Ports: ports, NoAutoResume: s.noResume,
	})
	if !s.suspended {
		h.idx.UpsertPod(&PodRecord{Namespace: s.ns, Name: s.name, UID: "pod-" + s.uid,
			OwnerUID: s.uid, Ready: !s.notReady, PodIPs: []string{ip}})
	}
	return s.uid
}

// request builds a request to the router with routing headers for a sandbox
// served at addr.
func (h *harness) request(method, path, id string, addr netip.AddrPort, body io.Reader) *http.Request {
	req, err := http.NewRequest(method, h.url+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("X-Sandbox-ID", id)
	req.Header.Set("X-Sandbox-Port", strconv.Itoa(int(addr.Port())))
	return req
}

// fakeControl records operating-mode patches. When autoReady is set, a
// resume makes the sandbox ready after readyDelay by updating the index,
// playing the controller and kubelet.
type fakeControl struct {
	idx        *Index
	mu         sync.Mutex
	patches    []string
	activity   int
	autoReady  map[SandboxKey]netip.AddrPort
	readyDelay time.Duration
	fail       error
}

func (f *fakeControl) SetOperatingMode(_ context.Context, key SandboxKey, uid, mode, rv string, _ time.Time) error {
	f.mu.Lock()
	f.patches = append(f.patches, key.String()+"="+mode)
	addr, auto := f.autoReady[key]
	fail := f.fail
	f.mu.Unlock()
	if fail != nil {
		return fail
	}
	if mode == ModeRunning && auto {
		go func() {
			time.Sleep(f.readyDelay)
			ip := addr.Addr().String()
			f.idx.UpsertSandbox(&SandboxRecord{Key: key, UID: uid, ResourceVersion: "2", Ready: true,
				PodIPs: []string{ip}, Ports: []uint16{addr.Port()}})
			f.idx.UpsertPod(&PodRecord{Namespace: key.Namespace, Name: key.Name, UID: "pod2-" + uid,
				OwnerUID: uid, Ready: true, PodIPs: []string{ip}})
		}()
	}
	return nil
}

func (f *fakeControl) MarkActivity(context.Context, SandboxKey, string, time.Time) error {
	f.mu.Lock()
	f.activity++
	f.mu.Unlock()
	return nil
}

func (f *fakeControl) patchCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.patches)
}

// backend starts an HTTP server on a loopback address (127.0.0.x:0).
func backend(t *testing.T, ip string, h http.Handler) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

func netipParseAddrPort(s string) (netip.AddrPort, error) { return netip.ParseAddrPort(s) }

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return -1
}

func mustDo(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return resp
}

func mustReq(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

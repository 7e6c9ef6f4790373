package router

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// unparsedNamespace is the sandbox_namespace label value used when the
// request never got a trustworthy namespace (health checks, 400s, unknown
// namespaces).
const unparsedNamespace = "-"

// BuildInfo is stamped into sandbox_router_build_info.
type BuildInfo struct {
	GitVersion string
	GitCommit  string
	BuildDate  string
}

// Metrics holds the router's collectors on a private registry. There are no
// per-sandbox labels (unbounded cardinality); namespace is the finest grain.
type Metrics struct {
	Registry *prometheus.Registry

	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	inflight        prometheus.Gauge
	upstreamErrors  *prometheus.CounterVec
	upstreamRetries *prometheus.CounterVec
	authzDecisions  *prometheus.CounterVec
	certReloads     *prometheus.CounterVec
	resumes         *prometheus.CounterVec
	holdDuration    *prometheus.HistogramVec
	idleSuspends    *prometheus.CounterVec
	// Raw TCP tunnels (tunnel.go).
	tunnelsOpened *prometheus.CounterVec
	tunnelsActive *prometheus.GaugeVec
	tunnelBytes   *prometheus.CounterVec
	// CacheVerification is 1 while targets are verified against the
	// Sandbox/Pod cache and 0 in the reduced mode (alert on 0).
	CacheVerification prometheus.Gauge
}

// NewMetrics creates and registers all collectors.
func NewMetrics(bi BuildInfo) *Metrics {
	reg := prometheus.NewRegistry()
	labels := []string{"method", "code", "sandbox_namespace"}
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_requests_total",
			Help: "Requests handled by the proxy listener.",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandbox_router_request_duration_seconds",
			Help:    "Request duration including streamed bodies and upgraded sessions.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 180},
		}, labels),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_router_inflight_requests",
			Help: "Requests currently being served.",
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_upstream_errors_total",
			Help: "Failed upstream round trips by reason (timeout, tls, eof, dial, other).",
		}, []string{"sandbox_namespace", "reason"}),
		upstreamRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_upstream_retries_total",
			Help: "Upstream dial retries.",
		}, []string{"sandbox_namespace"}),
		authzDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_authz_decisions_total",
			Help: "Authorization decisions.",
		}, []string{"sandbox_namespace", "decision"}),
		certReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_cert_reloads_total",
			Help: "TLS certificate reload attempts.",
		}, []string{"outcome"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_resumes_total",
			Help: "Resume patches issued for suspended sandboxes (one per shared resume).",
		}, []string{"sandbox_namespace", "outcome"}),
		holdDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sandbox_router_hold_duration_seconds",
			Help:    "Time requests were held waiting for a sandbox to become ready.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"sandbox_namespace", "outcome"}),
		idleSuspends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_idle_suspensions_total",
			Help: "Sandboxes suspended after being idle.",
		}, []string{"sandbox_namespace", "outcome"}),
		tunnelsOpened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_tunnels_opened_total",
			Help: "Raw TCP tunnels switched to after the sandbox port was dialled (refusals count in sandbox_router_requests_total only).",
		}, []string{"sandbox_namespace"}),
		tunnelsActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandbox_router_tunnels_active",
			Help: "Raw TCP tunnels open now.",
		}, []string{"sandbox_namespace"}),
		tunnelBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_router_tunnel_bytes_total",
			Help: "Bytes carried by raw TCP tunnels, by direction (to_sandbox, from_sandbox).",
		}, []string{"sandbox_namespace", "direction"}),
		CacheVerification: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandbox_router_cache_verification",
			Help: "1 when every target is verified against the Sandbox/Pod cache; 0 in the reduced mode (header and DNS routing, address-class checks only).",
		}),
	}
	m.CacheVerification.Set(1)
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sandbox_router_build_info",
		Help: "Build information; always 1.",
		ConstLabels: prometheus.Labels{
			"git_version": bi.GitVersion,
			"git_commit":  bi.GitCommit,
			"build_date":  bi.BuildDate,
			"go_version":  runtime.Version(),
			"compiler":    runtime.Compiler,
			"platform":    runtime.GOOS + "/" + runtime.GOARCH,
		},
	})
	build.Set(1)
	reg.MustRegister(m.requests, m.duration, m.inflight, m.upstreamErrors, m.upstreamRetries,
		m.authzDecisions, m.certReloads, m.resumes, m.holdDuration, m.idleSuspends, m.CacheVerification, build,
		m.tunnelsOpened, m.tunnelsActive, m.tunnelBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// methodLabel bounds the method label to the standard verbs.
func methodLabel(m string) string {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		return m
	}
	return "OTHER"
}

func (m *Metrics) observeRequest(method string, code int, ns string, seconds float64) {
	c := strconv.Itoa(code)
	mt := methodLabel(method)
	m.requests.WithLabelValues(mt, c, ns).Inc()
	m.duration.WithLabelValues(mt, c, ns).Observe(seconds)
}

func (m *Metrics) authz(ns string, allowed bool) {
	d := "deny"
	if allowed {
		d = "allow"
	}
	m.authzDecisions.WithLabelValues(ns, d).Inc()
}

func (m *Metrics) resume(ns string, err error) {
	m.resumes.WithLabelValues(ns, outcome(err)).Inc()
}

func (m *Metrics) hold(ns string, ok bool, seconds float64) {
	o := "ready"
	if !ok {
		o = "failed"
	}
	m.holdDuration.WithLabelValues(ns, o).Observe(seconds)
}

func (m *Metrics) idleSuspend(ns string, err error) {
	m.idleSuspends.WithLabelValues(ns, outcome(err)).Inc()
}

func (m *Metrics) certReload(err error) {
	m.certReloads.WithLabelValues(outcome(err)).Inc()
}

func outcome(err error) string {
	if err != nil {
		return "failure"
	}
	return "success"
}

// upstreamReason classifies a proxy error for sandbox_router_upstream_errors_total.
func upstreamReason(err error) string {
	var ne net.Error
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case isTLSError(err):
		return "tls"
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &dnsErr),
		errors.As(err, &opErr) && opErr.Op == "dial":
		return "dial"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "other"
}

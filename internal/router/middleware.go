package router

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentOptions configures Instrument.
type InstrumentOptions struct {
	Metrics *Metrics
	// AccessLog is nil when access logging is off.
	AccessLog *logr.Logger
	// Tracer and Propagator are nil when tracing is off.
	Tracer       trace.Tracer
	Propagator   propagation.TextMapPropagator
	MaxBodyBytes int64
}

// Instrument wraps the proxy listener's mux with, outer to inner: the body
// limit, tracing, access log and metrics, and the refusal of request targets
// that are not origin-form paths. It also creates the per-request state.
func Instrument(next http.Handler, o InstrumentOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.MaxBodyBytes > 0 && r.Body != nil && r.Body != http.NoBody {
			// Exceeding the limit fails the upstream copy mid-stream (502),
			// as upstream does; the sandbox may have seen a partial body.
			r.Body = http.MaxBytesReader(w, r.Body, o.MaxBodyBytes)
		}
		start := time.Now()
		st := &reqState{nsLabel: unparsedNamespace,
			rawID: r.Header.Get(HeaderSandboxID), rawNS: r.Header.Get(HeaderSandboxNamespace)}
		ctx := context.WithValue(r.Context(), stateKey{}, st)
		var span trace.Span
		if o.Tracer != nil {
			ctx = o.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
			ctx, span = o.Tracer.Start(ctx, "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					attribute.String("http.method", r.Method),
					attribute.String("http.target", r.URL.Path),
					attribute.String("sandbox.id", st.rawID),
					attribute.String("sandbox.namespace", st.rawNS),
				))
		}
		sw := &statusWriter{ResponseWriter: w}
		o.Metrics.inflight.Inc()
		defer func() {
			rec := recover()
			o.Metrics.inflight.Dec()
			code := sw.status()
			if rec != nil && !sw.wroteHeader {
				// The handler aborted before answering (client gone).
				code = 499
			}
			o.Metrics.observeRequest(r.Method, code, st.nsLabel, time.Since(start).Seconds())
			if span != nil {
				span.SetAttributes(attribute.Int("http.status_code", code))
				if code >= 500 {
					span.SetStatus(codes.Error, http.StatusText(code))
				}
				span.End()
			}
			if o.AccessLog != nil && !probePath(r.URL.Path) {
				logAccess(*o.AccessLog, r, st, code, sw.bytes, time.Since(start), span)
			}
			if rec != nil {
				panic(rec)
			}
		}()
		if framedByTransferEncoding(r) {
			// RFC 9112 §6.1: a request with both Content-Length and
			// Transfer-Encoding may be processed by the Transfer-Encoding
			// alone, but the connection must be closed after the response:
			// a front proxy that framed it by Content-Length disagrees with
			// us about where the next request starts (request smuggling).
			// net/http deletes Content-Length before a handler runs, so the
			// combination cannot be told apart from plain chunked; every
			// HTTP/1.1 request framed by Transfer-Encoding closes its
			// connection (a streaming client pays one reconnect).
			sw.Header().Set("Connection", "close")
		}
		if !originForm(r) {
			writeDetail(sw, http.StatusBadRequest, "Request target must be an origin-form path.")
			return
		}
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// originForm rejects absolute-form ("GET http://169.254.169.254/ HTTP/1.1"),
// authority-form (CONNECT) and asterisk-form targets: a router is not a
// forward proxy, and accepting them invites confusion about which host a
// request is for.
func originForm(r *http.Request) bool {
	return len(r.RequestURI) > 0 && r.RequestURI[0] == '/' && r.Method != http.MethodConnect
}

// framedByTransferEncoding reports an HTTP/1.x request whose body length
// came from Transfer-Encoding (HTTP/2 has no such framing).
func framedByTransferEncoding(r *http.Request) bool {
	return r.ProtoMajor == 1 && len(r.TransferEncoding) > 0
}

func probePath(p string) bool {
	return p == "/healthz" || p == "/readyz" || p == "/metrics"
}

func logAccess(l logr.Logger, r *http.Request, st *reqState, code int, n int64, d time.Duration, span trace.Span) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	kv := []any{
		"method", r.Method, "path", r.URL.Path, "status", code,
		"duration_ms", float64(d.Microseconds()) / 1000, "client_ip", host,
		"sandbox_id", st.rawID, "sandbox_namespace", st.rawNS,
		"bytes_out", n, "user_agent", r.UserAgent(),
	}
	if span != nil {
		sc := span.SpanContext()
		kv = append(kv, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	}
	l.Info("request", kv...)
}

// statusWriter records the status and byte count. It forwards Flush and
// Hijack and exposes Unwrap so that http.ResponseController (used by
// ReverseProxy for flushing, upgrades and full duplex) reaches the real
// writer.
type statusWriter struct {
	http.ResponseWriter
	code        int
	bytes       int64
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx other than 101 are informational (100-continue, 103 Early Hints)
	// and are followed by the real status.
	if code >= 200 || code == http.StatusSwitchingProtocols {
		if !w.wroteHeader {
			w.code, w.wroteHeader = code, true
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *statusWriter) Flush() {
	if !w.wroteHeader {
		w.code, w.wroteHeader = http.StatusOK, true
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("hijack: %w", err)
	}
	// ReverseProxy writes the 101 response straight onto the hijacked
	// connection, so this is the only place the switch can be observed.
	if !w.wroteHeader {
		w.code, w.wroteHeader = http.StatusSwitchingProtocols, true
	}
	return c, rw, nil
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

package router

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Listener names, as used by Server.Addr.
const (
	ListenerHTTP    = "http"
	ListenerHTTPS   = "https"
	ListenerMetrics = "metrics"
	ListenerProbes  = "probes"
)

// Proxy listener timeouts. No read or write timeout: long bodies and
// upgraded sessions must be able to stream.
const (
	proxyReadHeaderTimeout = 10 * time.Second
	proxyIdleTimeout       = 120 * time.Second
)

// ServerOptions configures NewServer.
type ServerOptions struct {
	HTTPAddr        string
	HTTPSAddr       string
	MetricsAddr     string
	ProbeAddr       string
	TLSConfig       *tls.Config // required when HTTPSAddr is set
	ShutdownTimeout time.Duration
	// Proxy handles every path of the proxy listeners except /healthz.
	Proxy http.Handler
	// Wrap, if set, wraps the proxy listeners' mux (instrumentation).
	Wrap func(http.Handler) http.Handler
	// Drain waits for in-flight proxied requests, including upgraded
	// connections that http.Server.Shutdown does not track.
	Drain   func(context.Context) error
	Metrics *Metrics
	Log     logr.Logger
}

// Server runs the router's listeners.
type Server struct {
	opts  ServerOptions
	ready atomic.Bool
	// degraded, when set, says why the router serves in the reduced mode;
	// the probes report it rather than claim full health.
	degraded atomic.Pointer[string]
	servers  map[string]*http.Server
	lns      map[string]net.Listener
	// base is the parent of every request context; cancelling it after the
	// shutdown budget aborts what is still streaming, including upgraded
	// connections that http.Server.Shutdown does not track.
	base       context.Context
	cancelBase context.CancelFunc
}

// NewServer builds the listeners' servers; nothing is bound yet.
func NewServer(o ServerOptions) *Server {
	s := &Server{opts: o, servers: map[string]*http.Server{}, lns: map[string]net.Listener{}}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	baseCtx := func(net.Listener) context.Context { return s.base }

	if o.HTTPAddr != "" || o.HTTPSAddr != "" {
		proxyMux := http.NewServeMux()
		// Answered by the router itself: a sandbox's own /healthz is not
		// reachable through it (same as upstream).
		proxyMux.HandleFunc("/healthz", s.healthz)
		proxyMux.Handle("/", o.Proxy)
		var proxyHandler http.Handler = proxyMux
		if o.Wrap != nil {
			proxyHandler = o.Wrap(proxyMux)
		}
		if o.HTTPAddr != "" {
			var p http.Protocols
			p.SetHTTP1(true)
			// Prior-knowledge HTTP/2 on the plain port, for gRPC.
			p.SetUnencryptedHTTP2(true)
			s.servers[ListenerHTTP] = &http.Server{
				Handler: proxyHandler, ReadHeaderTimeout: proxyReadHeaderTimeout,
				IdleTimeout: proxyIdleTimeout, Protocols: &p, BaseContext: baseCtx,
				ErrorLog: serverErrorLog(o.Log),
			}
		}
		if o.HTTPSAddr != "" {
			var p http.Protocols
			p.SetHTTP1(true)
			p.SetHTTP2(true)
			s.servers[ListenerHTTPS] = &http.Server{
				Handler: proxyHandler, ReadHeaderTimeout: proxyReadHeaderTimeout,
				IdleTimeout: proxyIdleTimeout, Protocols: &p, BaseContext: baseCtx,
				TLSConfig: o.TLSConfig, ErrorLog: serverErrorLog(o.Log),
			}
		}
	}
	if o.MetricsAddr != "" {
		mm := http.NewServeMux()
		mm.Handle("/metrics", promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{}))
		s.servers[ListenerMetrics] = &http.Server{Handler: mm, ReadHeaderTimeout: proxyReadHeaderTimeout}
	}
	if o.ProbeAddr != "" {
		pm := http.NewServeMux()
		pm.HandleFunc("/healthz", s.healthz)
		pm.HandleFunc("/readyz", s.readyz)
		s.servers[ListenerProbes] = &http.Server{Handler: pm, ReadHeaderTimeout: proxyReadHeaderTimeout}
	}
	return s
}

// healthz answers 200 while the process serves (liveness: restarting would
// not help). The body is the reference's {"status":"ok"} in the full mode;
// in the reduced mode it says so: {"status":"degraded","mode":"reduced",
// "detail":...}.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if why := s.degraded.Load(); why != nil {
		b, _ := json.Marshal(map[string]string{"status": "degraded", "mode": "reduced", "detail": *why})
		_, _ = w.Write(append(b, '\n'))
		return
	}
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// SetDegraded records that the router runs in the reduced mode and why.
func (s *Server) SetDegraded(reason string) { s.degraded.Store(&reason) }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.ready.Load() {
		if why := s.degraded.Load(); why != nil {
			// Ready (it serves), but not claiming what it lacks.
			_, _ = w.Write([]byte("ok (degraded: reduced mode, " + *why + ")"))
			return
		}
		_, _ = w.Write([]byte("ok"))
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte("draining"))
}

// SetReady flips /readyz.
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// Bind opens every listener synchronously, so that a port conflict is an
// error of the caller rather than of a background goroutine. On failure it
// closes what it had already bound.
func (s *Server) Bind() error {
	addrs := map[string]string{
		ListenerHTTP: s.opts.HTTPAddr, ListenerHTTPS: s.opts.HTTPSAddr,
		ListenerMetrics: s.opts.MetricsAddr, ListenerProbes: s.opts.ProbeAddr,
	}
	for _, name := range []string{ListenerHTTP, ListenerHTTPS, ListenerMetrics, ListenerProbes} {
		if s.servers[name] == nil {
			continue
		}
		ln, err := net.Listen("tcp", addrs[name])
		if err != nil {
			s.closeListeners()
			return fmt.Errorf("binding %s listener on %s: %w", name, addrs[name], err)
		}
		s.lns[name] = ln
	}
	return nil
}

func (s *Server) closeListeners() {
	for name, ln := range s.lns {
		_ = ln.Close()
		delete(s.lns, name)
	}
}

// Addr returns the bound address of a listener, or nil.
func (s *Server) Addr(name string) net.Addr {
	if ln := s.lns[name]; ln != nil {
		return ln.Addr()
	}
	return nil
}

// Serve serves on the bound listeners until ctx ends, then drains: /readyz
// turns 503, every server shuts down concurrently within one shared
// ShutdownTimeout, and whatever still runs after that is cut.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, len(s.lns))
	for name, ln := range s.lns {
		srv := s.servers[name]
		go func() {
			var err error
			if name == ListenerHTTPS {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", name, err)
			}
		}()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	return errors.Join(serveErr, s.Shutdown())
}

// Shutdown drains and stops every server.
func (s *Server) Shutdown() error {
	s.SetReady(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for name, srv := range s.servers {
		if s.lns[name] == nil {
			continue
		}
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				// Budget exhausted: cut the remaining connections.
				s.cancelBase()
				_ = srv.Close()
				if !errors.Is(err, context.DeadlineExceeded) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("shutting down %s listener: %w", name, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if s.opts.Drain != nil {
		if err := s.opts.Drain(ctx); err != nil {
			s.opts.Log.Info("shutdown budget exhausted; cutting remaining streams", "error", err.Error())
		}
	}
	s.cancelBase()
	return errors.Join(errs...)
}

// serverErrorLog sends net/http's own messages (TLS handshake failures,
// malformed requests) to the structured log at debug verbosity.
func serverErrorLog(l logr.Logger) *log.Logger {
	return log.New(logrWriter{l.V(1)}, "", 0)
}

type logrWriter struct{ l logr.Logger }

func (w logrWriter) Write(p []byte) (int, error) {
	w.l.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

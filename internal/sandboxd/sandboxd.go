// Package sandboxd assembles the in-sandbox runtime daemon: the legacy
// runtime API (package legacy, :8888), the REST API (package restapi,
// :8080) and the gRPC process API (package process, :9090), all confined to
// a workspace root (package workspace), with one graceful shutdown path.
package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/httpguard"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/lateenv"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/legacy"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/process"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/restapi"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

// Config is the daemon configuration; cmd/sandboxd fills it from flags.
type Config struct {
	// ListenHost is the address all three servers bind to.
	ListenHost string
	// RESTPort serves /v1 (files, health, metadata).
	RESTPort int
	// GRPCPort serves process.v1.ProcessService.
	GRPCPort int
	// LegacyPort serves the python-runtime compatible API; 0 disables it.
	LegacyPort int
	// RootDir is the workspace of the REST and gRPC APIs.
	RootDir string
	// LegacyBaseDir is the workspace and command directory of the legacy
	// API; empty means RootDir.
	LegacyBaseDir string
	// MetadataEnvPrefix selects the variables of /v1/metadata.
	MetadataEnvPrefix string
	// ShutdownTimeout bounds the graceful part of shutdown.
	ShutdownTimeout time.Duration
	// HTTPIdleTimeout closes idle keep-alive connections.
	HTTPIdleTimeout time.Duration
	// StreamChunkSize bounds Start output events; 0 means 4096.
	StreamChunkSize int
	// MaxOutputBytes caps each buffered output stream of /execute and
	// Execute; 0 means no cap.
	MaxOutputBytes int
	// ExecTimeout bounds each legacy /execute.
	ExecTimeout legacy.ExecTimeout
	// ExecDrainGrace bounds how long /execute waits for output held open
	// by background children after the command exited.
	ExecDrainGrace time.Duration
	// LateEnv holds the env late-bound by the claim controller (see
	// package lateenv); nil means none can be delivered and processes
	// inherit the daemon's environment.
	LateEnv *lateenv.Store
	// Logger receives structured logs; nil discards.
	Logger *slog.Logger
}

// Validate checks the parts of the configuration that flags cannot.
func (c *Config) Validate() error {
	if c.RootDir == "" {
		return errors.New("--root-dir must not be empty")
	}
	ports := map[int]string{}
	for _, p := range []struct {
		name     string
		port     int
		optional bool
	}{{"--rest-port", c.RESTPort, false}, {"--grpc-port", c.GRPCPort, false}, {"--legacy-port", c.LegacyPort, true}} {
		if p.optional && p.port == 0 {
			continue
		}
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("%s must be in 1-65535, got %d", p.name, p.port)
		}
		if other, dup := ports[p.port]; dup {
			return fmt.Errorf("%s and %s must differ, both are %d", other, p.name, p.port)
		}
		ports[p.port] = p.name
	}
	if c.ShutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	return nil
}

// Daemon is a configured sandboxd, ready to serve.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	root    *workspace.Root
	legRoot *workspace.Root
	rest    *restapi.Server
	legacy  http.Handler
	procs   *process.Service
	late    *lateenv.Store
}

// New opens the workspace roots (creating them if needed) and builds the
// handlers. It does not bind any socket.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := workspace.Open(cfg.RootDir)
	if err != nil {
		return nil, err
	}
	legRoot := root
	if cfg.LegacyBaseDir != "" && cfg.LegacyBaseDir != cfg.RootDir {
		if legRoot, err = workspace.Open(cfg.LegacyBaseDir); err != nil {
			_ = root.Close()
			return nil, err
		}
	}
	late := cfg.LateEnv
	if late == nil {
		late = lateenv.New(nil, os.Environ(), log)
	}
	d := &Daemon{cfg: cfg, log: log, root: root, legRoot: legRoot, late: late}
	d.rest = restapi.New(restapi.Config{
		Root:              root,
		MetadataEnvPrefix: cfg.MetadataEnvPrefix,
		Logger:            log.With("api", "rest"),
	})
	d.legacy = legacy.New(legacy.Config{
		Root:        legRoot,
		ExecTimeout: cfg.ExecTimeout,
		MaxOutput:   cfg.MaxOutputBytes,
		DrainGrace:  cfg.ExecDrainGrace,
		Environ:     late.Environ,
		Logger:      log.With("api", "legacy"),
	})
	d.procs = process.New(process.Config{
		Root:      root,
		ChunkSize: cfg.StreamChunkSize,
		MaxOutput: cfg.MaxOutputBytes,
		Environ:   late.Environ,
		Logger:    log.With("api", "process"),
	})
	return d, nil
}

// Close releases the workspace roots.
func (d *Daemon) Close() error {
	err := d.root.Close()
	if d.legRoot != d.root {
		err = errors.Join(err, d.legRoot.Close())
	}
	return err
}

// restHandler is the REST API plus the late-binding endpoint, which
// answers on the REST port because that is where the controller dials.
func (d *Daemon) restHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(latebind.Path, d.late.Handler())
	mux.Handle("/", d.rest)
	return mux
}

// LateEnv exposes the late-bound env store (tests).
func (d *Daemon) LateEnv() *lateenv.Store { return d.late }

// SetReady flips /v1/health.
func (d *Daemon) SetReady(ready bool) { d.rest.SetReady(ready) }

// Processes exposes the process service (tests, shutdown).
func (d *Daemon) Processes() *process.Service { return d.procs }

// Listeners are the sockets ServeListeners serves on; a nil Legacy
// disables the legacy API.
type Listeners struct {
	REST, GRPC, Legacy net.Listener
}

// Listen binds the configured addresses.
func (d *Daemon) Listen() (Listeners, error) {
	var ls Listeners
	var lc net.ListenConfig
	bind := func(port int) (net.Listener, error) {
		addr := net.JoinHostPort(d.cfg.ListenHost, strconv.Itoa(port))
		l, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return l, nil
	}
	var err error
	if ls.REST, err = bind(d.cfg.RESTPort); err != nil {
		return ls, err
	}
	if ls.GRPC, err = bind(d.cfg.GRPCPort); err != nil {
		_ = ls.REST.Close()
		return ls, err
	}
	if d.cfg.LegacyPort != 0 {
		if ls.Legacy, err = bind(d.cfg.LegacyPort); err != nil {
			_ = ls.REST.Close()
			_ = ls.GRPC.Close()
			return ls, err
		}
	}
	return ls, nil
}

// Run listens on the configured addresses and serves until ctx ends.
func (d *Daemon) Run(ctx context.Context) error {
	ls, err := d.Listen()
	if err != nil {
		return err
	}
	return d.ServeListeners(ctx, ls)
}

// ServeListeners serves until ctx ends or a server fails, then shuts down:
// health turns 503, running processes get SIGTERM and, after a short grace,
// SIGKILL; HTTP servers drain in-flight requests for up to ShutdownTimeout
// and are then closed (which also kills commands still running for them);
// the gRPC server stops gracefully or is stopped hard at the same deadline.
func (d *Daemon) ServeListeners(ctx context.Context, ls Listeners) error {
	// Request contexts derive from base; cancelling it kills the
	// commands of requests that outlive the graceful shutdown.
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	newHTTP := func(h http.Handler, deny httpguard.DenyFunc, name string, l net.Listener) (*http.Server, net.Listener) {
		srv := &http.Server{
			Handler:           httpguard.Handler(h, deny),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       d.cfg.HTTPIdleTimeout,
			BaseContext:       func(net.Listener) context.Context { return base },
			ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
		}
		l = httpguard.Listener(srv, l)
		// Outermost, so refusals are logged too.
		srv.Handler = accessLog(srv.Handler, d.log.With("api", name))
		return srv, l
	}
	type served struct {
		name string
		srv  *http.Server
		l    net.Listener
	}
	restSrv, restL := newHTTP(d.restHandler(), restapi.Refuse, "rest", ls.REST)
	https := []served{{"rest", restSrv, restL}}
	if ls.Legacy != nil {
		legSrv, legL := newHTTP(d.legacy, legacy.Refuse, "legacy", ls.Legacy)
		https = append(https, served{"legacy", legSrv, legL})
	}
	gs := grpc.NewServer()
	processv1.RegisterProcessServiceServer(gs, d.procs)
	reflection.Register(gs)

	errc := make(chan error, len(https)+1)
	for _, s := range https {
		d.log.Info("serving", "api", s.name, "addr", s.l.Addr().String())
		go func() {
			if err := s.srv.Serve(s.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", s.name, err)
			}
		}()
	}
	d.log.Info("serving", "api", "grpc", "addr", ls.GRPC.Addr().String())
	go func() {
		if err := gs.Serve(ls.GRPC); err != nil {
			errc <- fmt.Errorf("grpc server: %w", err)
		}
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		d.log.Info("shutting down")
	case serveErr = <-errc:
		d.log.Error("server failed; shutting down", "err", serveErr)
	}

	d.rest.SetReady(false)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { d.procs.ShutdownProcesses(sctx) })
	for _, s := range https {
		wg.Go(func() {
			if err := s.srv.Shutdown(sctx); err != nil {
				d.log.Warn("graceful HTTP shutdown incomplete; closing", "api", s.name, "err", err)
				cancelBase()
				_ = s.srv.Close()
			}
		})
	}
	wg.Go(func() {
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			d.log.Warn("graceful gRPC stop incomplete; stopping")
			gs.Stop()
			<-stopped
		}
	})
	wg.Wait()
	d.log.Info("stopped")
	return serveErr
}

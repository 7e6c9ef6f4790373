// Package apiwait holds a starting component back until the API server
// answers, with its liveness probe passing meanwhile. A controller or
// router that exits on the first refused connection is restarted by the
// kubelet with a growing backoff, and stays down for minutes after an API
// server outage has ended; one that waits here starts within seconds of
// the server's return.
package apiwait

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// Options tune Wait.
type Options struct {
	// ProbeAddr is the component's health probe address. While waiting, a
	// stand-in server there answers /healthz with 200 (the process is alive
	// and doing what it should) and /readyz with 503, so the kubelet's
	// liveness probe does not kill a controller that only waits. "" or "0":
	// no stand-in.
	ProbeAddr string
	// MaxInterval caps the backoff between attempts (default 2s: one
	// cheap GET per component every 2 s while the server is away, and a
	// start within about 2 s of its return).
	MaxInterval time.Duration
	// LogEvery is how often a continuing wait is logged (default 30s).
	LogEvery time.Duration
	// Log receives the progress; the zero value discards it.
	Log logr.Logger
	// OnRetry, when set, is called after each failed attempt.
	OnRetry func(err error)
}

// Wait returns once the API server answers, or with ctx's error.
//
// What a component does before it serves (the controller's discovery, its
// late-binding key and webhook certificates; the router's access review,
// which picks its mode, and its initial LIST) needs the API server. A
// controller restarted while the API server is away, which is exactly when
// it loses its leader lease, would otherwise exit on the first refused
// connection, and a router would give up its initial LIST after a minute;
// the kubelet then backs the restarts off to minutes. Waiting here, one
// restart covers any outage and the component starts within MaxInterval of
// the server's return.
//
// "Answers" means /readyz says ok and then discovery (/api and /apis, which
// the controller's REST mapper reads first and fails hard on) answers too,
// each or refuses with a client error (a cluster that forbids /readyz is
// up all the same); connection errors, 5xx and 429 mean wait. /readyz
// alone was not enough: a controller restarted into a just-returned API
// server saw /readyz ok and then its discovery fail ("failed to get server
// groups: unknown") and exited.
func Wait(ctx context.Context, cfg *rest.Config, o Options) error {
	if o.MaxInterval <= 0 {
		o.MaxInterval = 2 * time.Second
	}
	if o.LogEvery <= 0 {
		o.LogEvery = 30 * time.Second
	}
	// A loaded server may be slow to answer: an attempt's own timeout is
	// not the short backoff.
	timeout := max(o.MaxInterval, 10*time.Second)
	withTimeout := rest.CopyConfig(cfg)
	withTimeout.Timeout = timeout
	dc, err := discovery.NewDiscoveryClientForConfig(withTimeout)
	if err != nil {
		return fmt.Errorf("API server client: %w", err)
	}
	stop, err := serveWaitingProbes(o.ProbeAddr)
	if err != nil {
		return err
	}
	defer stop()

	start := time.Now()
	var lastLog time.Time
	interval := o.MaxInterval / 16
	for attempt := 1; ; attempt++ {
		err := upAndDiscoverable(ctx, dc, timeout)
		if err == nil {
			if attempt > 1 {
				o.Log.Info("API server reachable", "waited", time.Since(start).Round(time.Millisecond).String(), "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the API server at %s: %w (last error: %w)", cfg.Host, ctx.Err(), err)
		}
		if now := time.Now(); now.Sub(lastLog) >= o.LogEvery {
			lastLog = now
			o.Log.Info("waiting for the API server", "host", cfg.Host, "waited", now.Sub(start).Round(time.Second).String(), "error", err.Error())
		}
		if o.OnRetry != nil {
			o.OnRetry(err)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the API server at %s: %w (last error: %w)", cfg.Host, ctx.Err(), err)
		case <-t.C:
		}
		interval = min(2*interval, o.MaxInterval)
	}
}

// upAndDiscoverable asks /readyz, then the server's API groups the way a
// REST mapper does (discovery of /api and /apis), each within timeout. Nil
// means the server answered both. dc's own timeout bounds the discovery.
func upAndDiscoverable(ctx context.Context, dc *discovery.DiscoveryClient, timeout time.Duration) error {
	if err := get(ctx, dc.RESTClient(), timeout, "/readyz"); err != nil {
		return err
	}
	_, err := dc.ServerGroups()
	var status apierrors.APIStatus
	if err == nil || errors.As(err, &status) && refusedButUp(int(status.Status().Code)) {
		return nil
	}
	return fmt.Errorf("discovery: %w", err)
}

// refusedButUp reports whether an HTTP status code other than 2xx still
// shows a server that is up: a client error, for instance a cluster that
// forbids /readyz. 5xx and 429 mean it is not serving yet.
func refusedButUp(code int) bool {
	return code != 0 && code < 500 && code != http.StatusTooManyRequests
}

// get asks the API server for path once. Nil means the server answers.
func get(ctx context.Context, c rest.Interface, timeout time.Duration, path string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var code int
	err := c.Get().AbsPath(path).Do(ctx).StatusCode(&code).Error()
	switch {
	case err == nil:
		return nil
	case refusedButUp(code):
		return nil // up, only not telling us
	case code != 0:
		return fmt.Errorf("%s answered %d: %w", path, code, err)
	}
	return err
}

// serveWaitingProbes starts the stand-in probe server on addr and returns
// what stops it. Stopping closes the listener before returning, so the
// component can bind the same address right after.
func serveWaitingProbes(addr string) (func(), error) {
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health probe listener while waiting for the API server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "waiting for the API server", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l) // ErrServerClosed on stop
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

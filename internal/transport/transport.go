// Package transport shapes the controller's connections to the apiserver.
//
// client-go shares one HTTP/2 connection per rest.Config, and the
// kube-apiserver allows 100 concurrent streams on a connection
// (SETTINGS_MAX_CONCURRENT_STREAMS), whatever the worker counts and QPS
// say. Under a burst, the Sandbox and claim workers' writes and the
// informers' watch streams then queue behind one another on that single
// connection: watch events arrive late and every write waits for a stream.
// Two remedies, both opt-in flags as in the reference controller:
//
//   - Connections > 1 spreads non-watch requests round-robin over that many
//     independent connections (--api-connections);
//   - SeparateWatch gives the informers' list/watch a connection of its own
//     (--separate-watch-connection), so write bursts never delay events.
package transport

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Options are the transport settings.
type Options struct {
	// Connections is the number of connections non-watch requests are
	// spread over; 1 keeps client-go's shared transport.
	Connections int
	// SeparateWatch gives the informer cache its own connection.
	SeparateWatch bool
}

// Validate reports settings that cannot work.
func (o Options) Validate() error {
	if o.Connections < 1 {
		return fmt.Errorf("--api-connections must be >= 1, got %d", o.Connections)
	}
	return nil
}

// Apply returns the rest config the manager's clients use (a copy of cfg,
// sharded when Connections > 1) and, with SeparateWatch, the http.Client
// its informer cache uses (nil otherwise: the cache shares the clients'
// transport). cfg itself is not modified. Sharding needs control of the
// transport, so a config with a custom Dial, Transport or WrapTransport
// is refused rather than silently bypassed.
func Apply(cfg *rest.Config, o Options) (*rest.Config, *http.Client, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if o.Connections > 1 || o.SeparateWatch {
		switch {
		case cfg.Dial != nil:
			return nil, nil, errors.New("connection sharding: the rest config already has a custom Dial")
		case cfg.Transport != nil:
			return nil, nil, errors.New("connection sharding: the rest config already has a custom Transport")
		case cfg.WrapTransport != nil:
			return nil, nil, errors.New("connection sharding: the rest config already has a WrapTransport")
		}
	}
	var watchClient *http.Client
	if o.SeparateWatch {
		var err error
		// Built before sharding is installed: one connection, watches only.
		watchClient, err = rest.HTTPClientFor(ownConnection(cfg))
		if err != nil {
			return nil, nil, fmt.Errorf("building the watch connection: %w", err)
		}
	}
	out := rest.CopyConfig(cfg)
	if o.Connections == 1 {
		return out, watchClient, nil
	}
	shards := make([]http.RoundTripper, o.Connections)
	for i := range shards {
		rt, err := rest.TransportFor(ownConnection(cfg))
		if err != nil {
			return nil, nil, fmt.Errorf("building API connection %d: %w", i, err)
		}
		shards[i] = rt
	}
	rr := &roundRobin{shards: shards}
	// The shards already carry TLS and authentication; the transport
	// client-go builds underneath is never used.
	out.WrapTransport = func(http.RoundTripper) http.RoundTripper { return rr }
	return out, watchClient, nil
}

// ownConnection returns a copy of cfg with a dialer of its own: client-go
// never shares a cached transport for a config with a custom Dial, so the
// copy gets a connection nobody else uses.
func ownConnection(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return c
}

// roundRobin sends each request over the next connection in turn.
type roundRobin struct {
	shards []http.RoundTripper
	next   atomic.Uint64
}

func (r *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	i := r.next.Add(1) % uint64(len(r.shards))
	return r.shards[i].RoundTrip(req)
}

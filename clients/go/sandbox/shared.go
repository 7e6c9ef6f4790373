package sandbox

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// routerTunnelIdle is how long a port-forward tunnel to the router that no
// handle uses any more stays open for the next handle.
var routerTunnelIdle = 30 * time.Second

// sharedState is what the handles built on one K8sHelper share: the
// port-forward tunnels to the router and the HTTP transports of requests
// that go through the router. Neither depends on the sandbox (the router
// routes each request by its headers), so an agent that opens sandboxes
// one after another pays for the tunnel's setup and for new connections
// once, not per sandbox. The zero value is ready to use.
type sharedState struct {
	mu         sync.Mutex
	tunnels    map[string]*sharedTunnel
	transports map[time.Duration]*http.Transport
}

// sharedTunnel is a router tunnel and the number of handles using it.
type sharedTunnel struct {
	t              *tunnel
	namespace, pod string
	refs           int
	idle           *time.Timer // closes the tunnel once unused for routerTunnelIdle
}

func (st *sharedTunnel) alive() bool {
	select {
	case <-st.t.Done():
		return false
	default:
		return true
	}
}

// acquireRouterTunnel returns a live tunnel to a router found in
// namespaces (the first with one), shared with the helper's other handles,
// opening it with open if there is none. Each acquire needs a release.
func (h *K8sHelper) acquireRouterTunnel(ctx context.Context, namespaces []string,
	open func(ctx context.Context) (t *tunnel, namespace, pod string, err error),
) (*sharedTunnel, error) {
	key := strings.Join(namespaces, ",")
	take := func() *sharedTunnel {
		st := h.sh.tunnels[key]
		if st == nil || !st.alive() {
			return nil
		}
		st.refs++
		if st.idle != nil {
			st.idle.Stop()
			st.idle = nil
		}
		return st
	}
	h.sh.mu.Lock()
	st := take()
	h.sh.mu.Unlock()
	if st != nil {
		return st, nil
	}
	t, ns, pod, err := open(ctx)
	if err != nil {
		return nil, err
	}
	h.sh.mu.Lock()
	if st := take(); st != nil {
		// Another handle opened one meanwhile: use it, drop ours.
		h.sh.mu.Unlock()
		t.Close()
		return st, nil
	}
	st = &sharedTunnel{t: t, namespace: ns, pod: pod, refs: 1}
	if h.sh.tunnels == nil {
		h.sh.tunnels = map[string]*sharedTunnel{}
	}
	h.sh.tunnels[key] = st
	h.sh.mu.Unlock()
	return st, nil
}

// releaseRouterTunnel gives back an acquired tunnel. The last user leaves
// it open for routerTunnelIdle; a dead tunnel is forgotten at once.
func (h *K8sHelper) releaseRouterTunnel(namespaces []string, st *sharedTunnel) {
	key := strings.Join(namespaces, ",")
	h.sh.mu.Lock()
	defer h.sh.mu.Unlock()
	st.refs--
	if st.refs > 0 {
		return
	}
	if !st.alive() || h.sh.tunnels[key] != st {
		if h.sh.tunnels[key] == st {
			delete(h.sh.tunnels, key)
		}
		go st.t.Close()
		return
	}
	st.idle = time.AfterFunc(routerTunnelIdle, func() {
		h.sh.mu.Lock()
		if st.refs > 0 || h.sh.tunnels[key] != st {
			h.sh.mu.Unlock()
			return
		}
		delete(h.sh.tunnels, key)
		h.sh.mu.Unlock()
		st.t.Close()
	})
}

// sharedTransport returns the helper's HTTP transport for requests through
// the router with per-attempt timeout perAttempt, so that keep-alive
// connections outlive one handle.
func (h *K8sHelper) sharedTransport(perAttempt time.Duration) *http.Transport {
	h.sh.mu.Lock()
	defer h.sh.mu.Unlock()
	if t := h.sh.transports[perAttempt]; t != nil {
		return t
	}
	if h.sh.transports == nil {
		h.sh.transports = map[time.Duration]*http.Transport{}
	}
	t := newTransport(perAttempt)
	h.sh.transports[perAttempt] = t
	return t
}

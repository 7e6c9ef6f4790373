package sandbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/portforward"
)

// fakeTunnel is a tunnel that ends when closed, like a real one.
func fakeTunnel() *tunnel {
	return &tunnel{Tunnel: portforward.Stub(1), local: []uint16{1}}
}

// One tunnel serves every handle of a helper; the last release keeps it
// for routerTunnelIdle; a dead one is replaced.
func TestRouterTunnelIsShared(t *testing.T) {
	defer func(d time.Duration) { routerTunnelIdle = d }(routerTunnelIdle)
	routerTunnelIdle = time.Hour
	h := &K8sHelper{}
	var opens atomic.Int32
	open := func(context.Context) (*tunnel, string, string, error) {
		opens.Add(1)
		return fakeTunnel(), "ns", "router-0", nil
	}
	nss := []string{"a", "b"}
	acquire := func() *sharedTunnel {
		t.Helper()
		st, err := h.acquireRouterTunnel(context.Background(), nss, open)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := acquire(), acquire()
	if a != b || opens.Load() != 1 || a.refs != 2 || a.namespace != "ns" || a.pod != "router-0" {
		t.Fatalf("two acquires: %p %p, %d opens, %d refs", a, b, opens.Load(), a.refs)
	}
	h.releaseRouterTunnel(nss, a)
	h.releaseRouterTunnel(nss, b)
	if !a.alive() {
		t.Fatal("the last release closed the tunnel at once")
	}
	if c := acquire(); c != a || opens.Load() != 1 {
		t.Fatalf("an idle tunnel was not reused (%d opens)", opens.Load())
	}
	if other, _ := h.acquireRouterTunnel(context.Background(), []string{"elsewhere"}, open); other == a || opens.Load() != 2 {
		t.Errorf("other namespaces share the tunnel (%d opens)", opens.Load())
	}

	// The tunnel dies: the next acquire opens a new one.
	a.t.Close()
	d := acquire()
	if d == a || !d.alive() || opens.Load() != 3 {
		t.Fatalf("a dead tunnel was handed out (%d opens)", opens.Load())
	}
	h.releaseRouterTunnel(nss, a) // the dead one's last user
	h.releaseRouterTunnel(nss, d)

	// Unused for routerTunnelIdle: closed and forgotten.
	routerTunnelIdle = 20 * time.Millisecond
	e := acquire()
	h.releaseRouterTunnel(nss, e)
	select {
	case <-e.t.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("an idle tunnel was never closed")
	}
	h.sh.mu.Lock()
	_, kept := h.sh.tunnels["a,b"]
	h.sh.mu.Unlock()
	if kept {
		t.Error("a closed tunnel is still registered")
	}
}

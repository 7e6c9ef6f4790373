package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/router/tunnel"
)

// tcpEcho serves raw TCP echo on ip:0 and counts connections.
func tcpEcho(t *testing.T, ip string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					_ = c.(*net.TCPConn).CloseWrite()
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return netip.MustParseAddrPort(ln.Addr().String()), &n
}

func (r *runningRouter) tunnel(ns, name string, port uint16, token string) (*tunnel.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	return tunnel.Dial(ctx, "http://"+r.proxy, tunnel.Target{Namespace: ns, Name: name, Port: int(port), Token: token}, nil)
}

// TestTunnelTokenReviewPerNamespace: a raw TCP tunnel through a router
// started like the binary (cache from a real apiserver, --authz-mode
// tokenreview) reaches a sandbox only with verb connect on it. The attack:
// a ServiceAccount token of namespace B asks for A's sandbox; it is
// refused with 403 and A's server sees no connection. A's own token with
// the grant gets an echo through the tunnel, half-close included.
func TestTunnelTokenReviewPerNamespace(t *testing.T) {
	nsA, nsB := newNamespace(t), newNamespace(t)
	node := startFakeNode(t, nsA)
	echo, accepted := tcpEcho(t, "127.0.0.61")
	node.set("db", echo.Addr(), false)
	newSandbox(t, nsA, "db", sandboxv1beta1.OperatingModeRunning, echo.Port())
	r := startRouter(t, nsA, "--authz-mode=tokenreview", "--authz-access-review-negative-ttl=200ms")
	tokA, tokB := saToken(t, nsA), saToken(t, nsB)

	refused := func(what string, token string, code int) {
		t.Helper()
		_, err := r.tunnel(nsA, "db", echo.Port(), token)
		var re *tunnel.RefusedError
		if !errors.As(err, &re) || re.StatusCode != code {
			t.Fatalf("%s: %v, want a %d refusal", what, err, code)
		}
	}
	refused("anonymous", "", 401)
	refused("namespace B's token on A's sandbox", tokB, 403)
	grant(t, nsA, nsB, "get", "list", "watch")
	refused("B as a viewer of A", tokB, 403)
	if n := accepted.Load(); n != 0 {
		t.Fatalf("refused tunnels reached A's sandbox %d times", n)
	}

	grant(t, nsA, nsA, "connect")
	var c *tunnel.Conn
	eventually(t, "A's grant to take effect", func() bool {
		var err error
		c, err = r.tunnel(nsA, "db", echo.Port(), tokA)
		return err == nil
	})
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, "select 1;"); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "select 1;" {
		t.Fatalf("echo through the tunnel: %q %v", b, err)
	}
	refused("B after A's grant", tokB, 403)
	eventually(t, "tunnel metrics", func() bool {
		return r.metric(t, `sandbox_router_tunnels_opened_total{sandbox_namespace="`+nsA+`"}`) == "1" &&
			r.metric(t, `sandbox_router_tunnel_bytes_total{direction="to_sandbox",sandbox_namespace="`+nsA+`"}`) == "9" &&
			r.metric(t, `sandbox_router_tunnels_active{sandbox_namespace="`+nsA+`"}`) == "0"
	})
}

// TestTunnelAutoResumeThroughCache: a tunnel to a suspended Sandbox
// patches it to Running and is held until the (fake) node reports the pod
// ready, then carries bytes.
func TestTunnelAutoResumeThroughCache(t *testing.T) {
	ns := newNamespace(t)
	node := startFakeNode(t, ns)
	echo, _ := tcpEcho(t, "127.0.0.62")
	node.set("sleepy", echo.Addr(), false)
	newSandbox(t, ns, "sleepy", sandboxv1beta1.OperatingModeSuspended, echo.Port())
	eventually(t, "suspended status", func() bool { return len(getSandbox(t, ns, "sleepy").Status.Conditions) > 0 })
	r := startRouter(t, ns, "--ready-timeout=20s")
	c, err := r.tunnel(ns, "sleepy", echo.Port(), "")
	if err != nil {
		t.Fatalf("tunnel to a suspended sandbox: %v", err)
	}
	defer c.Close()
	if mode := getSandbox(t, ns, "sleepy").Spec.OperatingMode; mode != sandboxv1beta1.OperatingModeRunning {
		t.Fatalf("operating mode %q after the tunnel opened", mode)
	}
	_ = c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, "hi"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("echo %q %v", buf, err)
	}
}

package router

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"sigs.k8s.io/agent-sandbox/internal/router/tunnel"
)

// tcpEcho is a raw TCP server (no HTTP) on ip:0 that echoes every
// connection and half-closes its side when the client half-closes. It
// counts accepted connections, so refusal tests can prove nothing was
// dialled.
type tcpEcho struct {
	addr     netip.AddrPort
	accepted atomic.Int64
}

func startTCPEcho(t *testing.T, ip string) *tcpEcho {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	e := &tcpEcho{addr: netip.MustParseAddrPort(ln.Addr().String())}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					_ = c.(*net.TCPConn).CloseWrite()
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return e
}

func openTunnel(t *testing.T, h *harness, ns, name, uid string, port uint16) (*tunnel.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	return tunnel.Dial(ctx, h.url, tunnel.Target{Namespace: ns, Name: name, UID: uid, Port: int(port)}, nil)
}

// TestTunnelEchoHalfCloseAndMetrics: bytes go both ways through a raw TCP
// tunnel; the client's half-close reaches the sandbox (the echo server
// only ends its reply after reading EOF) and the sandbox's FIN comes back
// as EOF; the tunnel counters move, the request is logged as 101 and the
// idle tracker sees the tunnel as in flight while it is open.
func TestTunnelEchoHalfCloseAndMetrics(t *testing.T) {
	echo := startTCPEcho(t, "127.0.0.1")
	h := newHarness(t, harnessOpts{})
	uid := h.addSandbox(sandboxSpec{name: "echo", ns: "team-a", addr: echo.addr})

	c, err := openTunnel(t, h, "team-a", "echo", uid, echo.addr.Port())
	if err != nil {
		t.Fatalf("tunnel: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	key := SandboxKey{Namespace: "team-a", Name: "echo"}
	if _, inflight, ok := h.tracker.LastActivity(key); !ok || inflight != 1 {
		t.Fatalf("idle tracker while the tunnel is open: inflight %d (known %v)", inflight, ok)
	}
	if got := counterValue(h.metrics.tunnelsActive.WithLabelValues("team-a")); got != 1 {
		t.Fatalf("tunnels_active %v, want 1", got)
	}
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatalf("half-close: %v", err)
	}
	rest, err := io.ReadAll(c)
	if err != nil || string(rest) != "bye" {
		t.Fatalf("after half-close got %q, %v (want the echo of the last bytes, then EOF)", rest, err)
	}
	eventually(t, "tunnel closed", func() bool {
		_, inflight, _ := h.tracker.LastActivity(key)
		return inflight == 0 && counterValue(h.metrics.tunnelsActive.WithLabelValues("team-a")) == 0
	})
	if got := counterValue(h.metrics.tunnelsOpened.WithLabelValues("team-a")); got != 1 {
		t.Errorf("tunnels_opened_total %v, want 1", got)
	}
	for _, dir := range []string{"to_sandbox", "from_sandbox"} {
		if got := counterValue(h.metrics.tunnelBytes.WithLabelValues("team-a", dir)); got != 8 {
			t.Errorf("tunnel_bytes_total{direction=%q} %v, want 8", dir, got)
		}
	}
	if got := counterValue(h.metrics.requests.WithLabelValues("GET", "101", "team-a")); got != 1 {
		t.Errorf("requests_total{code=101} %v, want 1", got)
	}
}

// TestTunnelBannerBeforeClientSpeaks: a server that talks first (SSH,
// SMTP) gets its bytes to the client although the client sends nothing.
func TestTunnelBannerBeforeClientSpeaks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("SSH-2.0-test\r\n"))
		_, _ = io.Copy(io.Discard, c)
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "ssh", addr: ap})
	c, err := openTunnel(t, h, "default", "ssh", "", ap.Port())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	line := make([]byte, len("SSH-2.0-test\r\n"))
	if _, err := io.ReadFull(c, line); err != nil || string(line) != "SSH-2.0-test\r\n" {
		t.Fatalf("banner %q %v", line, err)
	}
}

// TestTunnelLargeTransfer pushes 32 MiB each way at once and compares
// digests: nothing is lost, duplicated or reordered, and the copy does not
// deadlock when both directions are full.
func TestTunnelLargeTransfer(t *testing.T) {
	echo := startTCPEcho(t, "127.0.0.1")
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "big", addr: echo.addr})
	c, err := openTunnel(t, h, "default", "big", "", echo.addr.Port())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * failAfter))
	const size = 32 << 20
	data := make([]byte, size)
	_, _ = rand.Read(data)
	want := sha256.Sum256(data)
	werr := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, bytes.NewReader(data))
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	hash := sha256.New()
	n, err := io.Copy(hash, c)
	if err != nil {
		t.Fatalf("reading after %d bytes: %v", n, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("writing: %v", err)
	}
	if n != size || !bytes.Equal(hash.Sum(nil), want[:]) {
		t.Fatalf("got %d bytes, digest mismatch %v", n, !bytes.Equal(hash.Sum(nil), want[:]))
	}
	if got := counterValue(h.metrics.tunnelBytes.WithLabelValues("default", "from_sandbox")); got != size {
		t.Errorf("from_sandbox bytes %v, want %d", got, size)
	}
}

// upgradeRequest is a tunnel request sent with net/http, so refusal tests
// can look at the status, Content-Type and JSON body of the answer.
func upgradeRequest(t *testing.T, h *harness, hdr map[string]string) *http.Response {
	t.Helper()
	req := mustReq(t, "GET", h.url+"/")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", tunnel.Protocol)
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	return mustDo(t, req)
}

// TestTunnelRefusals: every refusal is an HTTP answer with the router's
// JSON detail and the same status as for a proxied request, nothing is
// switched, and nothing is dialled (the sandbox's server sees no
// connection), including when the target is one of the router's own
// ports or another sandbox's pod.
func TestTunnelRefusals(t *testing.T) {
	echo := startTCPEcho(t, "127.0.0.4")
	other := startTCPEcho(t, "127.0.0.2")
	dead := func() netip.AddrPort {
		ln, err := net.Listen("tcp", "127.0.0.3:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return netip.MustParseAddrPort(ln.Addr().String())
	}()
	h := newHarness(t, harnessOpts{readyTimeout: 300 * time.Millisecond})
	uid := h.addSandbox(sandboxSpec{name: "echo", ns: "team-a", addr: echo.addr})
	h.addSandbox(sandboxSpec{name: "other", ns: "team-b", addr: other.addr})
	h.addSandbox(sandboxSpec{name: "gone", addr: dead})
	self := netip.MustParseAddrPort(h.addr)
	metricsPort := netip.MustParseAddrPort(h.srv.Addr(ListenerMetrics).String())
	// A sandbox whose "pod" sits on the router's own address and declares
	// its listeners' ports: the cache names it, the address policy still
	// refuses to dial.
	h.addSandbox(sandboxSpec{name: "loop", addr: self, extraPort: []uint16{metricsPort.Port()}})
	port := fmt.Sprint(echo.addr.Port())
	for _, c := range []struct {
		name   string
		hdr    map[string]string
		code   int
		detail string
	}{
		{"no id", map[string]string{"X-Sandbox-Port": port}, 400, msgIDRequired},
		{"bad port", map[string]string{"X-Sandbox-ID": "echo", "X-Sandbox-Namespace": "team-a", "X-Sandbox-Port": "0"}, 400, msgInvalidPort},
		{"unknown sandbox", map[string]string{"X-Sandbox-ID": "nope", "X-Sandbox-Namespace": "team-a", "X-Sandbox-Port": port},
			404, "Sandbox team-a/nope not found."},
		{"port not declared", map[string]string{"X-Sandbox-ID": "echo", "X-Sandbox-Namespace": "team-a", "X-Sandbox-Port": "22"},
			403, "Port 22 is not exposed by sandbox team-a/echo."},
		{"uid of another incarnation", map[string]string{"X-Sandbox-ID": "echo", "X-Sandbox-Namespace": "team-a",
			"X-Sandbox-Port": port, "X-Sandbox-UID": uid + "-old"}, 403, "X-Sandbox-UID does not match sandbox team-a/echo."},
		{"pod ip of another namespace's sandbox", map[string]string{"X-Sandbox-ID": "echo", "X-Sandbox-Namespace": "team-a",
			"X-Sandbox-Port": port, "X-Sandbox-Pod-IP": "127.0.0.2"}, 403, "X-Sandbox-Pod-IP does not belong to sandbox team-a/echo."},
		{"metadata address hint", map[string]string{"X-Sandbox-ID": "echo", "X-Sandbox-Namespace": "team-a",
			"X-Sandbox-Port": port, "X-Sandbox-Pod-IP": "169.254.169.254"}, 400, msgInvalidIP},
		{"router's own proxy port", map[string]string{"X-Sandbox-ID": "loop", "X-Sandbox-Port": fmt.Sprint(self.Port())},
			403, "Target address of sandbox default/loop is not allowed."},
		{"router's own metrics port", map[string]string{"X-Sandbox-ID": "loop", "X-Sandbox-Port": fmt.Sprint(metricsPort.Port())},
			403, "Target address of sandbox default/loop is not allowed."},
		{"nothing listens", map[string]string{"X-Sandbox-ID": "gone", "X-Sandbox-Port": fmt.Sprint(dead.Port())},
			502, "Could not connect to the backend sandbox: gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := upgradeRequest(t, h, c.hdr)
			defer resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("status %d want %d", resp.StatusCode, c.code)
			}
			if got := detailOf(t, resp); got != c.detail {
				t.Fatalf("detail %q want %q", got, c.detail)
			}
		})
	}
	if n := echo.accepted.Load() + other.accepted.Load(); n != 0 {
		t.Fatalf("refused tunnels reached a sandbox %d times", n)
	}
	// The typed client error carries the same status and detail.
	_, err := openTunnel(t, h, "team-a", "nope", "", echo.addr.Port())
	var re *tunnel.RefusedError
	if !errors.As(err, &re) || re.StatusCode != 404 || re.Detail != "Sandbox team-a/nope not found." {
		t.Fatalf("client error %v", err)
	}
}

// TestTunnelAuthorization runs the tunnel through the same authorizer as
// proxied requests: refused callers get 401/403 with the JSON detail and
// reach nothing. With scoped tokens, a tenant holding a token for its own
// sandbox in namespace team-b cannot tunnel into team-a's sandbox of the
// same name (the attack: copy the name, change the namespace header).
func TestTunnelAuthorization(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	authz, err := NewScopedTokenAuthorizer(secret)
	if err != nil {
		t.Fatal(err)
	}
	victim := startTCPEcho(t, "127.0.0.1")
	mine := startTCPEcho(t, "127.0.0.2")
	h := newHarness(t, harnessOpts{authz: authz})
	h.addSandbox(sandboxSpec{name: "box", ns: "team-a", addr: victim.addr})
	h.addSandbox(sandboxSpec{name: "box", ns: "team-b", addr: mine.addr})
	tokB, err := MintScopedToken(secret, "team-b", "box", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(ns string, port uint16, tok string) error {
		ctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		c, err := tunnel.Dial(ctx, h.url, tunnel.Target{Namespace: ns, Name: "box", Port: int(port), Token: tok}, nil)
		if err == nil {
			_ = c.Close()
		}
		return err
	}
	refused := func(what string, err error, code int) {
		t.Helper()
		var re *tunnel.RefusedError
		if !errors.As(err, &re) || re.StatusCode != code {
			t.Fatalf("%s: %v, want a %d refusal", what, err, code)
		}
	}
	refused("no token", dial("team-a", victim.addr.Port(), ""), 401)
	refused("garbage token", dial("team-a", victim.addr.Port(), "v1.x.y"), 401)
	refused("team-b's token on team-a's sandbox", dial("team-a", victim.addr.Port(), tokB), 403)
	if n := victim.accepted.Load(); n != 0 {
		t.Fatalf("refused tunnels reached the victim %d times", n)
	}
	if err := dial("team-b", mine.addr.Port(), tokB); err != nil {
		t.Fatalf("own sandbox: %v", err)
	}
	if got := counterValue(h.metrics.authzDecisions.WithLabelValues("team-a", "deny")); got != 3 {
		t.Errorf("authz deny decisions for team-a %v, want 3", got)
	}
}

// TestTunnelAutoResume: a tunnel to a suspended sandbox resumes it and is
// held until it is ready, like any request.
func TestTunnelAutoResume(t *testing.T) {
	echo := startTCPEcho(t, "127.0.0.1")
	h := newHarness(t, harnessOpts{autoResume: true})
	key := SandboxKey{Namespace: "default", Name: "sleepy"}
	h.control.autoReady = map[SandboxKey]netip.AddrPort{key: echo.addr}
	h.control.readyDelay = 50 * time.Millisecond
	h.addSandbox(sandboxSpec{name: "sleepy", addr: echo.addr, suspended: true})
	c, err := openTunnel(t, h, "default", "sleepy", "", echo.addr.Port())
	if err != nil {
		t.Fatalf("tunnel to a suspended sandbox: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	if _, err := c.Write([]byte("wake")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "wake" {
		t.Fatalf("echo %q %v", buf, err)
	}
	if n := h.control.patchCount(); n != 1 {
		t.Fatalf("resume patches %d, want 1", n)
	}
}

// TestTunnelCutOnShutdown: an open tunnel does not keep the router alive
// past its shutdown budget, and ends for the client.
func TestTunnelCutOnShutdown(t *testing.T) {
	echo := startTCPEcho(t, "127.0.0.1")
	h := newHarness(t, harnessOpts{shutdownTimeout: 200 * time.Millisecond})
	h.addSandbox(sandboxSpec{name: "held", addr: echo.addr})
	c, err := openTunnel(t, h, "default", "held", "", echo.addr.Port())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	h.stop()
	if _, err := io.ReadAll(c); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("tunnel still open after shutdown: %v", err)
		}
	}
}

// BenchmarkTunnelThroughput reports one-way throughput to a sink on
// loopback through a tunnel, and straight to the sink for comparison
// (go test -run x -bench TunnelThroughput ./internal/router/).
func BenchmarkTunnelThroughput(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	h := newHarness(b, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sink", addr: ap})
	run := func(b *testing.B, c net.Conn) {
		b.Helper()
		defer c.Close()
		chunk := make([]byte, 1<<20)
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("tunnel", func(b *testing.B) {
		c, err := tunnel.Dial(context.Background(), h.url, tunnel.Target{Namespace: "default", Name: "sink", Port: int(ap.Port())}, nil)
		if err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", ap.String())
		if err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
}

// eventually polls cond until it holds or failAfter passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTunnelOverHTTPS: the tunnel works on the HTTPS listener (ALPN
// http/1.1, as HTTP/2 has no upgrades), half-close included (TLS
// close_notify is read as EOF and passed on as FIN).
func TestTunnelOverHTTPS(t *testing.T) {
	ca := newCA(t, "ca")
	dir := t.TempDir()
	sc, sk := ca.issue(t, "127.0.0.1", false)
	writeFile(t, filepath.Join(dir, "tls.crt"), sc)
	writeFile(t, filepath.Join(dir, "tls.key"), sk)
	m := NewMetrics(BuildInfo{})
	reloader, err := NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), m, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := NewTLSConfig(reloader, MTLSOff, "")
	if err != nil {
		t.Fatal(err)
	}
	echo := startTCPEcho(t, "127.0.0.1")
	idx := NewIndex()
	idx.UpsertSandbox(&SandboxRecord{Key: SandboxKey{Namespace: "default", Name: "tls"}, UID: "u1", ResourceVersion: "1",
		Ready: true, PodIPs: []string{"127.0.0.1"}, Ports: []uint16{echo.addr.Port()}})
	idx.UpsertPod(&PodRecord{Namespace: "default", Name: "tls", UID: "p1", OwnerUID: "u1", Ready: true, PodIPs: []string{"127.0.0.1"}})
	proxy := NewProxyHandler(ProxyOptions{AllowLoopback: true, Resolver: idx, Policy: NewAddrPolicy(true),
		Metrics: m, ProxyTimeout: time.Second, ReadyTimeout: time.Second, Log: logr.Discard()})
	s := NewServer(ServerOptions{HTTPSAddr: "127.0.0.1:0", TLSConfig: cfg, ShutdownTimeout: time.Second, Proxy: proxy,
		Wrap:    func(next http.Handler) http.Handler { return Instrument(next, InstrumentOptions{Metrics: m}) },
		Metrics: m, Log: logr.Discard()})
	if err := s.Bind(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	dctx, dcancel := context.WithTimeout(context.Background(), failAfter)
	defer dcancel()
	c, err := tunnel.Dial(dctx, "https://"+s.Addr(ListenerHTTPS).String(),
		tunnel.Target{Namespace: "default", Name: "tls", Port: int(echo.addr.Port())}, &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatalf("tunnel over HTTPS: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, "over tls"); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "over tls" {
		t.Fatalf("echo over TLS: %q %v", b, err)
	}
}

// TestTunnelBytesSentWithTheRequest: bytes a client sends in the same
// packet as the upgrade request (before the 101) are part of the stream,
// not lost in the HTTP server's buffer. (A FIN before the 101 is "client
// gone", as for any HTTP request, so the half-close waits for the answer.)
func TestTunnelBytesSentWithTheRequest(t *testing.T) {
	echo := startTCPEcho(t, "127.0.0.1")
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "eager", addr: echo.addr})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(failAfter))
	req := fmt.Sprintf("GET / HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: %s\r\nX-Sandbox-ID: eager\r\nX-Sandbox-Port: %d\r\n\r\nearly-bytes",
		tunnel.Protocol, echo.addr.Port())
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v %v", resp, err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(br); err != nil || string(b) != "early-bytes" {
		t.Fatalf("echo of the early bytes: %q %v", b, err)
	}
}

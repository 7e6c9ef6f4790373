package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"sigs.k8s.io/agent-sandbox/internal/router/tunnel"
)

// tunnelResponse is the whole 101 answer of a TCP tunnel. It is written by
// hand onto the hijacked connection: net/http cannot send a 101 and then
// let the handler own the socket.
var tunnelResponse = []byte("HTTP/1.1 101 Switching Protocols\r\n" +
	"Connection: Upgrade\r\nUpgrade: " + tunnel.Protocol + "\r\n\r\n")

// isTunnel reports a raw TCP tunnel request (package tunnel documents the
// wire format): an HTTP/1.1 upgrade whose only protocol is
// agent-sandbox-tcp. Other upgrades are proxied to the sandbox unchanged.
func isTunnel(r *http.Request) bool {
	return r.ProtoMajor == 1 && isUpgrade(r) &&
		strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), tunnel.Protocol)
}

// serveTunnel connects a verified target to the client as a byte stream.
// Everything that decides whether and where to connect (route parsing,
// authorization, resolution with auto-resume, the address policy, idle
// tracking) has already run in ServeHTTP, exactly as for a proxied
// request; this only dials through the same policy-checking dialer and
// copies.
func (h *ProxyHandler) serveTunnel(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st := stateFrom(ctx)
	addr := st.target.Addr.String()
	if st.target.Host != "" {
		addr = net.JoinHostPort(st.target.Host, strconv.Itoa(int(st.target.Route.Port)))
	}
	up, err := h.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		h.proxyError(w, r, err)
		return
	}
	client, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		writeDetail(w, http.StatusInternalServerError, "The connection cannot be switched to a TCP tunnel.")
		return
	}
	// A failed write or flush of the tunnel's response ends it: err was
	// shadowed here once, so such a failure went unnoticed (ineffassign).
	_, err = rw.Write(tunnelResponse)
	if err == nil {
		err = rw.Flush()
	}
	if err != nil {
		_ = up.Close()
		_ = client.Close()
		return
	}
	// Bytes the server read past the request headers belong to the
	// stream. Everything after them is read from the socket itself: the
	// hijacked bufio.Reader reads through net/http's connection reader,
	// which cancels the request context on EOF (a half-close) and would
	// tear the tunnel down.
	var early []byte
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Peek(n)
		early = bytes.Clone(b)
	}
	m := h.metrics
	m.tunnelsOpened.WithLabelValues(st.nsLabel).Inc()
	active := m.tunnelsActive.WithLabelValues(st.nsLabel)
	active.Inc()
	defer active.Dec()
	pipe(ctx, client, io.MultiReader(bytes.NewReader(early), client), up,
		m.tunnelBytes.WithLabelValues(st.nsLabel, "to_sandbox"),
		m.tunnelBytes.WithLabelValues(st.nsLabel, "from_sandbox"))
}

// pipe copies both ways until both directions have ended. A clean EOF on
// one side is passed on as a half-close of the other, so request/response
// protocols that signal "end of request" with FIN work; an error on either
// side, or ctx ending (router shutdown), closes both connections at once.
// clientR reads the client connection including what the HTTP server had
// already buffered after the request headers.
func pipe(ctx context.Context, client net.Conn, clientR io.Reader, up net.Conn, toSandbox, fromSandbox prometheus.Counter) {
	var once sync.Once
	abort := func() {
		once.Do(func() {
			_ = client.Close()
			_ = up.Close()
		})
	}
	stop := context.AfterFunc(ctx, abort)
	defer stop()
	defer abort()
	var wg sync.WaitGroup
	oneWay := func(dst net.Conn, src io.Reader, c prometheus.Counter) {
		defer wg.Done()
		if err := copyCounting(dst, src, c); err != nil || closeWrite(dst) != nil {
			abort()
		}
	}
	wg.Add(2)
	go oneWay(up, clientR, toSandbox)
	go oneWay(client, up, fromSandbox)
	wg.Wait()
}

// copyCounting is io.Copy with a pooled buffer that adds every chunk to c as
// it goes, so the byte counters move during long-lived tunnels rather than
// at their end. It returns nil at EOF.
func copyCounting(dst io.Writer, src io.Reader, c prometheus.Counter) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
			c.Add(float64(n))
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// closeWrite half-closes c (TCP FIN; TLS close_notify then FIN).
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

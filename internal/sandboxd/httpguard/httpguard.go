// Package httpguard hardens sandboxd's HTTP/1 servers against two attacks
// that no handler can see on its own:
//
//   - ambiguous message framing (request smuggling): net/http resolves a
//     request carrying both Content-Length and Transfer-Encoding by
//     dropping Content-Length, so by the time a handler runs the evidence
//     is gone. RFC 9112 §6.1 wants such a connection closed, because a
//     proxy in front may have framed the bytes differently. The guard
//     therefore watches the raw byte stream of every connection (see
//     framing.go) and refuses, with 400 and a closed connection, every
//     request from the moment an ambiguous one was read.
//   - cross-site browser requests (CSRF): a page on any origin can POST a
//     CORS "simple" request (form, text/plain, multipart, or a body with no
//     type at all) to a port-forwarded sandboxd without a preflight. Every
//     unsafe method (anything but GET, HEAD, OPTIONS) that a browser marks
//     as cross-origin, by Sec-Fetch-Site or by an Origin that is not the
//     Host, is refused with 403 before it reaches a handler. Non-browser
//     clients (the SDKs, curl) send neither header and are unaffected.
package httpguard

import (
	"context"
	"io"
	"net"
	"net/http"
)

// DenyFunc writes a refusal in the API's own error format.
type DenyFunc func(w http.ResponseWriter, status int, msg string)

// Listener prepares srv for the framing check and returns the listener
// srv must serve on; serving on l itself would leave the check blind. It
// replaces srv.ConnContext, chaining any function already set. srv's
// handler must include Handler for the check to take effect.
func Listener(srv *http.Server, l net.Listener) net.Listener {
	inner := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if inner != nil {
			ctx = inner(ctx, c)
		}
		if gc, ok := c.(*conn); ok {
			ctx = context.WithValue(ctx, connKey{}, gc)
		}
		return ctx
	}
	// "OPTIONS *" is otherwise answered by net/http itself; routing it
	// through the handler keeps every request on a connection under the
	// guard.
	srv.DisableGeneralOptionsHandler = true
	return &listener{Listener: l}
}

type connKey struct{}

// Handler applies both checks to each request. Requests that did not come
// through a listener returned by Listener skip the framing check only.
func Handler(next http.Handler, deny DenyFunc) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gc, ok := r.Context().Value(connKey{}).(*conn); ok {
			if reason := gc.framing.poisoned(); reason != "" {
				// The rest of the stream cannot be trusted to be
				// split where a proxy in front split it: answer and
				// hang up.
				w.Header().Set("Connection", "close")
				deny(w, http.StatusBadRequest, "ambiguous request framing: "+reason)
				return
			}
		}
		if err := cop.Check(r); err != nil {
			deny(w, http.StatusForbidden, "cross-origin request refused: a browser page on another origin may not "+
				"call this API (Sec-Fetch-Site or Origin does not match the Host)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listener wraps each accepted connection so its bytes pass the framing
// tracker before net/http parses them.
type listener struct{ net.Listener }

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c}, nil
}

// conn feeds every byte read to the framing tracker. net/http never reads
// a connection from two goroutines at once, so the tracker itself needs no
// lock; only its verdict is shared with handlers.
type conn struct {
	net.Conn
	framing framing
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.framing.feed(p[:n])
	}
	return n, err
}

// CloseWrite lets net/http half-close before it closes, so the client
// reads the 400 instead of a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the sendfile path of the underlying TCP connection for
// file downloads.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// Package tunnel is the client side and the wire constants of the
// sandbox-router's raw TCP tunnel: an HTTP/1.1 request carrying the usual
// routing headers (X-Sandbox-ID, -Namespace, -Port, -UID, Authorization)
// with "Connection: Upgrade" and "Upgrade: agent-sandbox-tcp". The router
// resolves, authorizes and policy-checks it exactly like any proxied
// request, dials the sandbox port, and answers "101 Switching Protocols";
// from then on the connection carries the raw bytes of that TCP stream in
// both directions. A half-close (FIN) of either side is passed on to the
// other. Any refusal is an ordinary HTTP response with a JSON
// {"detail": ...} body, sent before anything is dialled or switched.
//
// The package has no dependency on the router itself, so clients (the CLI)
// do not link the router's cache and informers.
package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Protocol is the Upgrade token that selects the TCP tunnel. Any other
// upgrade (WebSocket, h2c) is forwarded to the sandbox as before.
const Protocol = "agent-sandbox-tcp"

// Routing header names on the wire (see internal/router/headers.go).
const (
	HeaderSandboxID        = "X-Sandbox-ID"
	HeaderSandboxUID       = "X-Sandbox-UID"
	HeaderSandboxNamespace = "X-Sandbox-Namespace"
	HeaderSandboxPort      = "X-Sandbox-Port"
)

// Target names the sandbox port to tunnel to.
type Target struct {
	Namespace string
	Name      string
	// UID, when set, pins the tunnel to one incarnation of the Sandbox.
	UID  string
	Port int
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
}

// RefusedError is a refusal answered by the router (or whatever sits in
// front of it) instead of switching protocols.
type RefusedError struct {
	StatusCode int
	// Detail is the router's {"detail": ...} message, or the start of the
	// body when it was not one.
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("router refused the tunnel: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Detail)
}

// Conn is an open tunnel. CloseWrite half-closes it: the sandbox side reads
// EOF while replies still arrive.
type Conn struct {
	net.Conn
	r *bufio.Reader // holds bytes that arrived right behind the 101
}

func (c *Conn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite sends FIN on the router connection (TCP, or TLS close_notify
// followed by FIN).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Dial opens a tunnel through the router at routerURL (http:// or
// https://). tlsConfig, if non-nil, is used for https (its NextProtos are
// forced to http/1.1: upgrades do not exist in HTTP/2).
func Dial(ctx context.Context, routerURL string, t Target, tlsConfig *tls.Config) (*Conn, error) {
	u, err := url.Parse(routerURL)
	if err != nil {
		return nil, fmt.Errorf("router URL %q: %w", routerURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("router URL %q: scheme must be http or https", routerURL)
	}
	host := u.Host
	if u.Port() == "" {
		switch u.Scheme {
		case "https":
			host = net.JoinHostPort(u.Hostname(), "443")
		default:
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("connecting to the sandbox-router at %s: %w", host, err)
	}
	c := raw
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if tlsConfig != nil {
			cfg = tlsConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("TLS handshake with the sandbox-router at %s: %w", host, err)
		}
		c = tc
	}
	tc, err := handshake(ctx, c, u, t)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// handshake sends the upgrade request on c and reads the answer.
func handshake(ctx context.Context, c net.Conn, u *url.URL, t Target) (*Conn, error) {
	// The context bounds the handshake only; the tunnel itself has no
	// deadline.
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path, RawPath: u.RawPath}, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	req.Header.Set(HeaderSandboxID, t.Name)
	req.Header.Set(HeaderSandboxNamespace, t.Namespace)
	req.Header.Set(HeaderSandboxPort, strconv.Itoa(t.Port))
	if t.UID != "" {
		req.Header.Set(HeaderSandboxUID, t.UID)
	}
	if t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	if err := req.Write(c); err != nil {
		return nil, fmt.Errorf("sending the tunnel request: %w", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("reading the router's answer to the tunnel request: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, &RefusedError{StatusCode: resp.StatusCode, Detail: detail(resp.Body)}
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), Protocol) {
		return nil, fmt.Errorf("router switched to %q instead of %q (is this a sandbox-router?)", resp.Header.Get("Upgrade"), Protocol)
	}
	if !stop() && ctx.Err() != nil {
		// The cancellation raced the answer; its deadline is set or about to be.
		return nil, fmt.Errorf("tunnel handshake: %w", ctx.Err())
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("clearing the handshake deadline: %w", err)
	}
	return &Conn{Conn: c, r: br}, nil
}

// detail extracts the router's message from an error body.
func detail(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4096))
	var d struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &d) == nil && d.Detail != "" {
		return d.Detail
	}
	return strings.TrimSpace(string(b))
}

// halfCloser is a connection that can send EOF while still reading.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// Join copies between a and b until both directions have ended, passing a
// clean EOF on as a half-close, and closes both. An error in either
// direction closes both at once. It returns the bytes copied a->b and b->a.
func Join(a, b halfCloser) (ab, ba int64) {
	var once sync.Once
	closeBoth := func() { once.Do(func() { _ = a.Close(); _ = b.Close() }) }
	defer closeBoth()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		var err error
		if ab, err = io.Copy(b, a); err != nil || b.CloseWrite() != nil {
			closeBoth()
		}
	}()
	go func() {
		defer wg.Done()
		var err error
		if ba, err = io.Copy(a, b); err != nil || a.CloseWrite() != nil {
			closeBoth()
		}
	}()
	wg.Wait()
	return ab, ba
}

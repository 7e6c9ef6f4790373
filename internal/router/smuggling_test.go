package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestSmugglingCLPlusTEClosesConnection sends, on one raw TCP connection, a
// request carrying both Content-Length and Transfer-Encoding: chunked whose
// Content-Length framing would hide a second request, followed by a
// pipelined request. RFC 9112 §6.1: the router may process the first by
// Transfer-Encoding but must close the connection after answering it, so
// the pipelined request is never processed.
func TestSmugglingCLPlusTEClosesConnection(t *testing.T) {
	var seen atomic.Int32
	paths := make(chan string, 8)
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		paths <- r.URL.Path
		fmt.Fprint(w, "ok")
	}))
	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})

	conn, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hdrs := fmt.Sprintf("X-Sandbox-ID: sb\r\nX-Sandbox-Port: %d\r\n", be.Port())
	// By Content-Length (6) the body is "0\r\n\r\nG"; by chunked it is empty
	// and "G..." would start the next request. Either way the next bytes on
	// this connection must not be served.
	smuggle := "POST /first HTTP/1.1\r\nHost: x\r\n" + hdrs +
		"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	pipelined := "GET /second HTTP/1.1\r\nHost: x\r\n" + hdrs + "\r\n"
	if _, err := io.WriteString(conn, smuggle+pipelined); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(failAfter))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading first response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// resp.Close is set from "Connection: close" (ReadResponse consumes the
	// header itself).
	if !resp.Close {
		t.Fatalf("first response (status %d, body %q) keeps the connection alive; headers %v", resp.StatusCode, body, resp.Header)
	}
	// The server must close: the next read sees EOF, not a second response.
	if resp2, err := http.ReadResponse(br, nil); err == nil {
		resp2.Body.Close()
		t.Fatalf("pipelined request after CL+TE was answered: %d", resp2.StatusCode)
	}
	if got := <-paths; got != "/first" {
		t.Fatalf("backend saw %q first", got)
	}
	select {
	case p := <-paths:
		t.Fatalf("backend saw the pipelined request %q", p)
	default:
	}
	if n := seen.Load(); n != 1 {
		t.Fatalf("backend served %d requests, want 1", n)
	}

	// A request framed by Content-Length alone keeps its connection.
	c2, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetReadDeadline(time.Now().Add(failAfter))
	plain := "POST /a HTTP/1.1\r\nHost: x\r\n" + hdrs + "Content-Length: 2\r\n\r\nhi" +
		"GET /b HTTP/1.1\r\nHost: x\r\n" + hdrs + "\r\n"
	if _, err := io.WriteString(c2, plain); err != nil {
		t.Fatal(err)
	}
	br2 := bufio.NewReader(c2)
	for i, want := range []string{"/a", "/b"} {
		resp, err := http.ReadResponse(br2, nil)
		if err != nil {
			t.Fatalf("keep-alive response %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("keep-alive response %d: status %d close %v", i, resp.StatusCode, resp.Close)
		}
		if got := <-paths; got != want {
			t.Fatalf("backend saw %q, want %q", got, want)
		}
	}
}

// TestDialNameAppliesPolicy: in the reduced mode the router dials DNS
// names; what a name resolves to is held to the same address policy, so a
// name pointing at loopback (or metadata) is no way around it.
func TestDialNameAppliesPolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	name := fmt.Sprintf("localhost:%d", port)
	if _, err := newRetryDialer(0, 0, 0, NewAddrPolicy(false), nil).DialContext(context.Background(), "tcp", name); !errors.Is(err, errDialForbidden) {
		t.Fatalf("name resolving to loopback, loopback not allowed: %v", err)
	}
	c, err := newRetryDialer(0, 0, 0, NewAddrPolicy(true), nil).DialContext(context.Background(), "tcp", name)
	if err != nil {
		t.Fatalf("name resolving to loopback, loopback allowed: %v", err)
	}
	c.Close()
	if _, err := newRetryDialer(0, 0, 0, NewAddrPolicy(true), nil).DialContext(context.Background(), "tcp", "no-such-host.invalid:80"); err == nil || errors.Is(err, errDialForbidden) {
		t.Fatalf("unresolvable name: %v", err)
	}
}

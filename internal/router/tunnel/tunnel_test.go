package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDialAgainstNonRouters: the client reports what answered instead of
// a tunnel, and never treats another upgrade as one.
func TestDialAgainstNonRouters(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintln(w, `{"detail": "Port 22 is not exposed by sandbox default/x."}`)
		case "/plain":
			fmt.Fprint(w, "hello")
		case "/websocket":
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "websocket")
			w.WriteHeader(http.StatusSwitchingProtocols)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tgt := Target{Namespace: "default", Name: "x", Port: 22}

	_, err := Dial(ctx, srv.URL+"/json", tgt, nil)
	var re *RefusedError
	if !errors.As(err, &re) || re.StatusCode != 403 || re.Detail != "Port 22 is not exposed by sandbox default/x." {
		t.Fatalf("JSON refusal: %v", err)
	}
	if _, err = Dial(ctx, srv.URL+"/plain", tgt, nil); !errors.As(err, &re) || re.StatusCode != 200 || re.Detail != "hello" {
		t.Fatalf("plain answer: %v", err)
	}
	if _, err = Dial(ctx, srv.URL+"/websocket", tgt, nil); err == nil || !strings.Contains(err.Error(), `switched to "websocket"`) {
		t.Fatalf("other upgrade: %v", err)
	}
	if _, err = Dial(ctx, "ftp://example.invalid", tgt, nil); err == nil || !strings.Contains(err.Error(), "scheme must be http or https") {
		t.Fatalf("bad scheme: %v", err)
	}
}

// TestDialHandshakeBoundedByContext: a server that accepts and never
// answers does not hang the client past its context.
func TestDialHandshakeBoundedByContext(t *testing.T) {
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
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, "http://"+ln.Addr().String(), Target{Namespace: "default", Name: "x", Port: 1}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a silent server produced a tunnel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Dial ignored its context")
	}
}

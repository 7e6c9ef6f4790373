package latebind

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestKeyID(t *testing.T) {
	a, _ := GenerateSigner()
	b, _ := GenerateSigner()
	pub, err := ParsePublicKey(a.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if got := KeyID(pub); got != a.KeyID() || len(got) != 16 {
		t.Fatalf("KeyID = %q, signer's %q", got, a.KeyID())
	}
	if a.KeyID() == b.KeyID() {
		t.Fatal("two keys share a key ID")
	}
}

func TestProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(State{KeyID: "abc", Applies: 1})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	st, err := Probe(context.Background(), srv.Client(), host, p)
	if err != nil || st.KeyID != "abc" || st.Applies != 1 {
		t.Fatalf("Probe = %+v, %v", st, err)
	}

	notSandboxd := httptest.NewServer(http.NotFoundHandler()) // nginx, jupyter
	defer notSandboxd.Close()
	host, port, _ = net.SplitHostPort(notSandboxd.Listener.Addr().String())
	p, _ = strconv.Atoi(port)
	if _, err := Probe(context.Background(), notSandboxd.Client(), host, p); err == nil {
		t.Fatal("a 404 passed the probe")
	}
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }))
	defer garbage.Close()
	host, port, _ = net.SplitHostPort(garbage.Listener.Addr().String())
	p, _ = strconv.Atoi(port)
	if _, err := Probe(context.Background(), garbage.Client(), host, p); err == nil {
		t.Fatal("a non-JSON answer passed the probe")
	}
}

package transport

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// h2Server is a TLS server speaking HTTP/2 that records which client
// connection served each request.
type h2Server struct {
	*httptest.Server
	mu    sync.Mutex
	conns map[string]int // remote address -> requests
}

func newH2Server(t *testing.T) *h2Server {
	t.Helper()
	s := &h2Server{conns: map[string]int{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("request over %s, want HTTP/2", r.Proto)
		}
		s.mu.Lock()
		s.conns[r.RemoteAddr]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *h2Server) config() *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

func (s *h2Server) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func get(t *testing.T, c *http.Client, url string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

func TestShardsUseDistinctConnections(t *testing.T) {
	for _, n := range []int{1, 4} {
		s := newH2Server(t)
		cfg, watch, err := Apply(s.config(), Options{Connections: n})
		if err != nil {
			t.Fatal(err)
		}
		if watch != nil {
			t.Error("a watch client without SeparateWatch")
		}
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		get(t, c, s.URL, 4*n)
		if got := s.connections(); got != n {
			t.Errorf("Connections=%d: requests used %d connections", n, got)
		}
		s.mu.Lock()
		for addr, reqs := range s.conns {
			if reqs != 4 {
				t.Errorf("Connections=%d: %s served %d requests, want 4 (round robin)", n, addr, reqs)
			}
		}
		s.mu.Unlock()
	}
}

func TestSeparateWatchHasItsOwnConnection(t *testing.T) {
	s := newH2Server(t)
	cfg, watch, err := Apply(s.config(), Options{Connections: 1, SeparateWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if watch == nil {
		t.Fatal("no watch client")
	}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get(t, c, s.URL, 3)
	get(t, watch, s.URL, 3)
	if got := s.connections(); got != 2 {
		t.Errorf("clients and watches used %d connections, want 2", got)
	}
}

func TestApplyRefuses(t *testing.T) {
	dial := (&net.Dialer{}).DialContext
	cases := map[string]struct {
		cfg  *rest.Config
		opts Options
	}{
		"zero connections": {&rest.Config{Host: "https://x"}, Options{Connections: 0}},
		"custom dial":      {&rest.Config{Host: "https://x", Dial: dial}, Options{Connections: 2}},
		"custom transport": {&rest.Config{Host: "https://x", Transport: http.DefaultTransport}, Options{Connections: 2}},
		"wrap transport":   {&rest.Config{Host: "https://x", WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return rt }}, Options{Connections: 1, SeparateWatch: true}},
		"negative shards":  {&rest.Config{Host: "https://x"}, Options{Connections: -3}},
	}
	for name, tc := range cases {
		if _, _, err := Apply(tc.cfg, tc.opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The defaults touch nothing, so any config is fine.
	if _, _, err := Apply(&rest.Config{Host: "https://x", Dial: dial}, Options{Connections: 1}); err != nil {
		t.Errorf("defaults with a custom dialer: %v", err)
	}
}

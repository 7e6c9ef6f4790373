package apiwait

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// freeAddr returns a loopback address nobody listens on right now, from
// below the ephemeral range so no client connection takes it meanwhile.
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.T(t)))
}

// status is the code url answers a GET with.
func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A controller started while the API server is away waits for it instead
// of exiting, answers its liveness probe (but not readiness) meanwhile, and
// goes on as soon as the server is reachable, with the probe port free for
// the manager.
func TestWaitOutlastsAnOutage(t *testing.T) {
	testenv.SkipShort(t)
	apiURL, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	frontAddr, probeAddr := freeAddr(t), freeAddr(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = apiURL.Scheme + "://" + frontAddr // nothing listens there yet: the outage

	failures := make(chan error, 100)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- Wait(ctx, cfg, Options{
			ProbeAddr:   probeAddr,
			MaxInterval: 200 * time.Millisecond,
			OnRetry:     func(err error) { failures <- err },
		})
	}()
	for i := range 3 {
		select {
		case err := <-failures:
			if i == 0 {
				t.Logf("first failed attempt: %v", err)
			}
		case err := <-done:
			t.Fatalf("returned during the outage: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no attempt within 30s")
		}
	}
	if got := status(t, "http://"+probeAddr+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz while waiting = %d, want 200", got)
	}
	if got := status(t, "http://"+probeAddr+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz while waiting = %d, want 503", got)
	}
	select {
	case err := <-done:
		t.Fatalf("returned during the outage: %v", err)
	default:
	}

	l, err := net.Listen("tcp", frontAddr) // the API server comes back
	if err != nil {
		t.Fatal(err)
	}
	testenv.TCPForwarder(t, l, apiURL.Host)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the API server came back: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still waiting 30s after the API server came back")
	}
	pl, err := net.Listen("tcp", probeAddr)
	if err != nil {
		t.Fatalf("probe address still taken after the wait: %v", err)
	}
	pl.Close()
}

// Shutting down while waiting returns the context's error and frees the
// probe port.
func TestWaitStopsWithItsContext(t *testing.T) {
	probeAddr := freeAddr(t)
	cfg := &rest.Config{Host: "http://" + freeAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	attempted := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() {
		done <- Wait(ctx, cfg, Options{
			ProbeAddr:   probeAddr,
			MaxInterval: 100 * time.Millisecond,
			OnRetry:     func(error) { attempted <- struct{}{} },
		})
	}()
	<-attempted
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop within 10s of the cancel")
	}
	pl, err := net.Listen("tcp", probeAddr)
	if err != nil {
		t.Fatalf("probe address still taken: %v", err)
	}
	pl.Close()
}

// What counts as "the API server answers".
func TestReadyzVerdicts(t *testing.T) {
	for _, tc := range []struct {
		code  int
		ready bool
	}{
		{http.StatusOK, true},
		{http.StatusForbidden, true}, // /readyz not granted: up all the same
		{http.StatusUnauthorized, true},
		{http.StatusNotFound, true},
		{http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false}, // a starting server's failed checks
		{http.StatusServiceUnavailable, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/readyz" {
				t.Errorf("asked %s, want /readyz", r.URL.Path)
			}
			w.WriteHeader(tc.code)
		}))
		dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		err = get(context.Background(), dc.RESTClient(), 5*time.Second, "/readyz")
		if got := err == nil; got != tc.ready {
			t.Errorf("/readyz %d: ready = %v (err %v), want %v", tc.code, got, err, tc.ready)
		}
		srv.Close()
	}
}

// A server whose /readyz says ok while its discovery still fails (as a
// kube-apiserver just back from a restart did) is not up yet: Wait goes on
// until the discovery a REST mapper does (/api, /apis) answers, and asks it
// after /readyz.
func TestWaitNeedsDiscoveryToo(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []string
		apis  = http.StatusServiceUnavailable
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r.URL.Path)
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		case "/api":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
		case "/apis":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(apis)
			_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`))
		default:
			t.Errorf("asked %s", r.URL.Path)
		}
	}))
	defer srv.Close()
	retries := make(chan error, 100)
	done := make(chan error, 1)
	go func() {
		done <- Wait(context.Background(), &rest.Config{Host: srv.URL}, Options{MaxInterval: 50 * time.Millisecond,
			OnRetry: func(err error) { retries <- err }})
	}()
	for range 3 {
		select {
		case err := <-retries:
			if !strings.Contains(err.Error(), "discovery") {
				t.Fatalf("retry for %v, want the failing /apis", err)
			}
		case err := <-done:
			t.Fatalf("returned while /apis failed: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no retry within 10s")
		}
	}
	mu.Lock()
	apis = http.StatusOK
	mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10s after /apis answered")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 3 || asked[0] != "/readyz" || asked[1] != "/api" || asked[2] != "/apis" {
		t.Errorf("asked %v, want /readyz, /api, /apis in that order first", asked)
	}
}

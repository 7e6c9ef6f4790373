package manager

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// The profiling endpoints exist on the metrics server exactly as the flags
// say: none by default, the CPU profile with --enable-pprof, everything
// with --enable-pprof-debug.
func TestPProfEndpointsFollowFlags(t *testing.T) {
	testenv.SkipShort(t)
	cases := []struct {
		name  string
		pprof PProf
		want  map[string]int
	}{
		{"default", PProf{}, map[string]int{
			"/metrics": 200, "/debug/pprof/profile?seconds=1": 404, "/debug/pprof/heap": 404, "/debug/fgprof?seconds=1": 404,
		}},
		{"enable-pprof", PProf{Enabled: true}, map[string]int{
			"/debug/pprof/profile?seconds=1": 200, "/debug/pprof/heap": 404, "/debug/fgprof?seconds=1": 404,
		}},
		{"enable-pprof-debug", PProf{Debug: true}, map[string]int{
			"/debug/pprof/profile?seconds=1": 200, "/debug/pprof/heap": 200, "/debug/pprof/mutex": 200, "/debug/fgprof?seconds=1": 200,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			mgr, err := New(env.Config, Options{MetricsBindAddress: addr, HealthProbeBindAddress: "0", PProf: tc.pprof})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			defer func() { cancel(); <-done }() //nolint:errcheck // shutdown after the check; its result is not under test
			deadline := time.Now().Add(10 * time.Second)
			for {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("metrics server never listened on %s", addr)
				}
				time.Sleep(50 * time.Millisecond)
			}
			for path, want := range tc.want {
				if got := status(t, "http://"+addr+path); got != want {
					t.Errorf("GET %s = %d, want %d", path, got, want)
				}
			}
		})
	}
}

func TestFgprofServesOneAtATime(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := oneAtATime(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}))
	srv := &http.Server{Handler: h}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	url := "http://" + l.Addr().String()
	first := make(chan int, 1)
	go func() {
		// Not status(): t.Fatal must not run outside the test goroutine.
		resp, err := http.Get(url)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-started
	if got := status(t, url); got != http.StatusTooManyRequests {
		t.Errorf("second concurrent request = %d, want 429", got)
	}
	close(release)
	if got := <-first; got != http.StatusOK {
		t.Errorf("first request = %d, want 200", got)
	}
}

package sandbox

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// testCtx returns a context bounded generously: it only stops a hung test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connectedSandbox returns a handle connected (without any cluster) the
// way Open would leave it, in the mode the options select. state is the
// sandbox's identity; retries back off by a millisecond.
func connectedSandbox(t *testing.T, o Options, st sandboxState) *Sandbox {
	t.Helper()
	o.Quiet = true
	if o.K8sHelper == nil {
		o.K8sHelper = &K8sHelper{}
	}
	if o.WarmPoolName == "" {
		o.WarmPoolName = "pool"
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.claimName, s.sandboxName = "claim-1", "sb-1"
	conn, err := s.connect(context.Background(), st)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	conn.http.backoffBase = time.Millisecond
	s.install(conn, st)
	t.Cleanup(func() { s.detach(time.Second) })
	return s
}

// directSandbox connects to srv through the Direct strategy (router
// headers on), with a known pod IP.
func directSandbox(t *testing.T, srv *httptest.Server, mutate func(*Options)) *Sandbox {
	t.Helper()
	o := Options{APIURL: srv.URL}
	if mutate != nil {
		mutate(&o)
	}
	return connectedSandbox(t, o, sandboxState{podName: "sb-1-pod", podIP: "10.1.2.3"})
}

// recorder is an httptest handler that records requests and answers from
// a script: answer(n, w, r) handles the n-th request (0-based).
type recorder struct {
	mu     sync.Mutex
	reqs   []*http.Request
	bodies [][]byte
	answer func(n int, w http.ResponseWriter, r *http.Request)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := readAll(r)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec.mu.Lock()
	n := len(rec.reqs)
	rec.reqs = append(rec.reqs, r.Clone(context.Background()))
	rec.bodies = append(rec.bodies, body)
	rec.mu.Unlock()
	rec.answer(n, w, r)
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

func (rec *recorder) req(i int) (*http.Request, []byte) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.reqs[i], rec.bodies[i]
}

func readAll(r *http.Request) []byte {
	if r.Body == nil {
		return nil
	}
	var buf []byte
	tmp := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			return buf
		}
	}
}

func newRecorder(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) (*recorder, *httptest.Server) {
	t.Helper()
	rec := &recorder{answer: answer}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv
}

func writeJSON(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// serverPort returns the port of an httptest server.
func serverPort(t *testing.T, srv *httptest.Server) int {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(p)
	return port
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func discardLogger() logr.Logger { return logr.Discard() }

package sandbox

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// watchGates holds the watch streams of chosen resources on the way from
// the real apiserver to the manager's informers, the way a slow or
// congested connection does: while a resource is held, its events stay
// unread in the stream, so the controller's cache lags the apiserver (and
// its own writes) until the test releases it. Nothing is dropped or faked;
// every event arrives, late.
type watchGates struct {
	mu   sync.Mutex
	cond *sync.Cond
	held map[string]bool
}

func newWatchGates() *watchGates {
	g := &watchGates{held: map[string]bool{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// wrap returns a copy of cfg whose watch responses pass through the gates.
func (g *watchGates) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return gatedTransport{next: rt, g: g}
	}
	return cfg
}

// hold holds the watch events of resource (e.g. "pods") until the returned
// release is called (and at the latest when the test ends).
func (g *watchGates) hold(t *testing.T, resource string) (release func()) {
	t.Helper()
	g.mu.Lock()
	g.held[resource] = true
	g.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.held, resource)
			g.mu.Unlock()
			g.cond.Broadcast()
		})
	}
	t.Cleanup(release)
	return release
}

func (g *watchGates) wait(resource string) {
	g.mu.Lock()
	for g.held[resource] {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

type gatedTransport struct {
	next http.RoundTripper
	g    *watchGates
}

func (t gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || req.URL.Query().Get("watch") != "true" {
		return resp, err
	}
	path := strings.TrimRight(req.URL.Path, "/")
	resp.Body = &gatedBody{ReadCloser: resp.Body, g: t.g, resource: path[strings.LastIndex(path, "/")+1:]}
	return resp, nil
}

// gatedBody hands out what it read only while its resource is not held:
// an event that arrives while held waits here, in order, for the release.
type gatedBody struct {
	io.ReadCloser
	g        *watchGates
	resource string
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.g.wait(b.resource)
	return n, err
}

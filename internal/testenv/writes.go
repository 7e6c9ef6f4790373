package testenv

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// WriteCounter counts the apiserver write requests (POST, PUT, PATCH,
// DELETE) a client makes, by verb and resource, so tests and benchmarks can
// hold the controllers to a write budget.
type WriteCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewWriteCounter returns an empty counter.
func NewWriteCounter() *WriteCounter { return &WriteCounter{counts: map[string]int{}} }

// Wrap returns a copy of cfg whose requests are counted.
func (w *WriteCounter) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return &countingTransport{next: rt, w: w}
	}
	return cfg
}

type countingTransport struct {
	next http.RoundTripper
	w    *WriteCounter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		key := req.Method + " " + resourceOf(req.URL.Path)
		t.w.mu.Lock()
		t.w.counts[key]++
		t.w.mu.Unlock()
	}
	return t.next.RoundTrip(req)
}

// resourceOf turns /api/v1/namespaces/ns/pods/name/status into
// "pods/status", and /apis/g/v/namespaces/ns/sandboxes into "sandboxes".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i < len(parts); i++ {
		if parts[i] == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			switch len(rest) {
			case 1, 2:
				return rest[0]
			default:
				return rest[0] + "/" + rest[2]
			}
		}
	}
	if len(parts) > 0 {
		return parts[len(parts)-1]
	}
	return path
}

// Total returns the number of writes counted, optionally only for the
// given resources (e.g. "pods", "sandboxes/status").
func (w *WriteCounter) Total(resources ...string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k, v := range w.counts {
		if len(resources) == 0 {
			n += v
			continue
		}
		res := k[strings.IndexByte(k, ' ')+1:]
		for _, r := range resources {
			if res == r {
				n += v
			}
		}
	}
	return n
}

// Snapshot returns a copy of the counts by "VERB resource".
func (w *WriteCounter) Snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.counts))
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

// Reset clears the counts.
func (w *WriteCounter) Reset() {
	w.mu.Lock()
	w.counts = map[string]int{}
	w.mu.Unlock()
}

// String renders the counts sorted, for test logs.
func (w *WriteCounter) String() string {
	snap := w.Snapshot()
	keys := make([]string, 0, len(snap))
	for k := range snap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strconv.Itoa(snap[k]))
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

package testenv

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Write is one mutating apiserver request seen by a WriteCounter.
type Write struct {
	At       time.Time
	Verb     string // create, update, patch, delete
	Resource string // e.g. sandboxes, sandboxes/status, pods/binding
	Name     string // object name ("" for collection creates)
	// Namespace is the request's namespace ("" for cluster-scoped objects).
	Namespace string
	Code      int // HTTP status (0 when the request failed in transport)
	// Took is the round trip: from sending the request to its response.
	Took time.Duration
}

// WriteCounter records every write request (POST, PUT, PATCH, DELETE) sent
// through a rest.Config it wrapped, so tests and benchmarks hold the
// controllers to a write budget by counting on the wire rather than
// estimating from metrics. The zero value is ready to use.
type WriteCounter struct {
	mu     sync.Mutex
	writes []Write
}

// NewWriteCounter returns an empty counter.
func NewWriteCounter() *WriteCounter { return &WriteCounter{} }

// Wrap returns a copy of cfg whose writes are recorded.
func (c *WriteCounter) Wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	prev := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return &countingTransport{next: rt, c: c}
	}
	return cfg
}

type countingTransport struct {
	next http.RoundTripper
	c    *WriteCounter
}

var verbs = map[string]string{
	http.MethodPost:   "create",
	http.MethodPut:    "update",
	http.MethodPatch:  "patch",
	http.MethodDelete: "delete",
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, ok := verbs[req.Method]
	if !ok {
		return t.next.RoundTrip(req)
	}
	at := time.Now()
	resp, err := t.next.RoundTrip(req)
	code := 0
	if resp != nil {
		code = resp.StatusCode
	}
	res, name := parsePath(req.URL.Path)
	t.c.mu.Lock()
	t.c.writes = append(t.c.writes, Write{At: at, Verb: verb, Resource: res, Name: name, Namespace: namespaceOf(req.URL.Path), Code: code, Took: time.Since(at)})
	t.c.mu.Unlock()
	return resp, err
}

// namespaceOf returns the namespace segment of an API path, or "".
func namespaceOf(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "namespaces" && i+2 < len(parts) {
			return parts[i+1]
		}
	}
	return ""
}

// parsePath extracts resource[/subresource] and name from an API path:
// /api/v1/namespaces/ns/pods/name/status is ("pods/status", "name"),
// /apis/g/v/namespaces/ns/sandboxes is ("sandboxes", "").
func parsePath(p string) (string, string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	i := 0
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		i = 2
	case len(parts) >= 3 && parts[0] == "apis":
		i = 3
	default:
		return p, ""
	}
	if i+1 < len(parts) && parts[i] == "namespaces" && i+2 < len(parts) {
		i += 2
	}
	rest := parts[i:]
	switch len(rest) {
	case 0:
		return "", ""
	case 1:
		return rest[0], ""
	case 2:
		return rest[0], rest[1]
	default:
		return rest[0] + "/" + rest[2], rest[1]
	}
}

// Writes returns a copy of the recorded writes, in the order they were sent.
func (c *WriteCounter) Writes() []Write {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Write(nil), c.writes...)
}

// Reset forgets the recorded writes.
func (c *WriteCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = nil
}

// Count returns how many writes match verb and resource ("" matches all).
func (c *WriteCounter) Count(verb, resource string) int {
	n := 0
	for _, w := range c.Writes() {
		if (verb == "" || w.Verb == verb) && (resource == "" || w.Resource == resource) {
			n++
		}
	}
	return n
}

// Total returns the number of writes, optionally only those to the given
// resources (e.g. "pods", "sandboxes/status").
func (c *WriteCounter) Total(resources ...string) int {
	if len(resources) == 0 {
		return len(c.Writes())
	}
	n := 0
	for _, r := range resources {
		n += c.Count("", r)
	}
	return n
}

// Snapshot returns the counts by "verb resource".
func (c *WriteCounter) Snapshot() map[string]int { return countBy(c.Writes()) }

// String renders the counts sorted, for test logs.
func (c *WriteCounter) String() string { return Summary(c.Writes()) }

func countBy(ws []Write) map[string]int {
	m := map[string]int{}
	for _, w := range ws {
		m[w.Verb+" "+w.Resource]++
	}
	return m
}

// Summary renders counts per "verb resource", sorted, for logs.
func Summary(ws []Write) string {
	m := countBy(ws)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

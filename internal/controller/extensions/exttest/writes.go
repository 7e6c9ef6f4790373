package exttest

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
	Code     int    // HTTP status
}

// WriteCounter records every non-GET request sent through a rest.Config it
// wrapped, so tests and benchmarks count apiserver writes exactly rather
// than estimating them from metrics.
type WriteCounter struct {
	mu     sync.Mutex
	writes []Write
}

// Wrap installs the counter on a copy of cfg.
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

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := ""
	switch req.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	if verb == "" {
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
	t.c.writes = append(t.c.writes, Write{At: at, Verb: verb, Resource: res, Name: name, Code: code})
	t.c.mu.Unlock()
	return resp, err
}

// parsePath extracts resource[/subresource] and name from an API path:
// /api/v1/namespaces/ns/pods/name/status or /apis/g/v/namespaces/ns/r/name.
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

// Writes returns a copy of the recorded writes.
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

// Summary renders counts per "verb resource", sorted, for logs.
func Summary(ws []Write) string {
	m := map[string]int{}
	for _, w := range ws {
		m[w.Verb+" "+w.Resource]++
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strconv.Itoa(m[k]))
	}
	return b.String()
}

// SplitClaimPath attributes writes to the claim path or the refill.
// adoptedAt maps each warm-adopted Sandbox to the time of its adoption
// patch. A write on an adopted Sandbox (or its Pod, same name) from that
// moment on, and every claim write, is claim path; everything else (pool
// creates, Pod creates and status up to Ready, pool status) is refill.
func SplitClaimPath(ws []Write, adoptedAt map[string]time.Time) (claimPath, refill []Write) {
	for _, w := range ws {
		base := strings.SplitN(w.Resource, "/", 2)[0]
		switch base {
		case "sandboxclaims":
			claimPath = append(claimPath, w)
			continue
		case "sandboxes", "pods":
			if t, ok := adoptedAt[w.Name]; ok && !w.At.Before(t) {
				claimPath = append(claimPath, w)
				continue
			}
		}
		refill = append(refill, w)
	}
	return claimPath, refill
}

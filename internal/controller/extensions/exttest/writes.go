package exttest

import (
	"strings"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// Write and WriteCounter are testenv's: every write on the wire, with its
// time, verb, resource and object name.
type (
	Write        = testenv.Write
	WriteCounter = testenv.WriteCounter
)

// Summary renders counts per "verb resource", sorted, for logs.
func Summary(ws []Write) string { return testenv.Summary(ws) }

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

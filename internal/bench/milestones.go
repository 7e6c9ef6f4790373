package bench

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Milestone names, in the order a claim passes them.
const (
	Created          = "created"
	Bound            = "bound"
	Ready            = "ready"
	Connected        = "connected" // the SDK's transport is up (SDK scenario)
	RuntimeAnswering = "runtime_answering"
	FirstOutput      = "first_output"
)

// Milestones lists the milestone names in order.
var Milestones = []string{Created, Bound, Ready, Connected, RuntimeAnswering, FirstOutput}

// ClaimTrace records when one claim reached each milestone. Start is when
// the client began the create request; zero times mean "not reached".
type ClaimTrace struct {
	Name    string               `json:"name"`
	Launch  string               `json:"launch_type,omitempty"`
	Start   time.Time            `json:"start"`
	At      map[string]time.Time `json:"at"`
	Err     string               `json:"error,omitempty"`
	Sandbox string               `json:"sandbox,omitempty"`

	// mu guards At: the claim watch and a time-to-interactive probe mark
	// the same trace concurrently.
	mu sync.Mutex
}

// NewTrace starts a trace at start.
func NewTrace(name string, start time.Time) *ClaimTrace {
	return &ClaimTrace{Name: name, Start: start, At: map[string]time.Time{}}
}

// Mark records a milestone the first time it is seen.
func (t *ClaimTrace) Mark(milestone string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.At[milestone]; !ok {
		t.At[milestone] = at
	}
}

// MarkCreated records Created at the create response, or at the earliest
// milestone already seen if that came first: the claim's watch events race
// the create response, and a claim seen bound certainly existed by then.
func (t *ClaimTrace) MarkCreated(response time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.At[Created]; ok {
		return
	}
	at := response
	for _, seen := range t.At {
		if seen.Before(at) {
			at = seen
		}
	}
	t.At[Created] = at
}

// Since returns the time from Start to a milestone.
func (t *ClaimTrace) Since(milestone string) (time.Duration, bool) {
	t.mu.Lock()
	at, ok := t.At[milestone]
	t.mu.Unlock()
	if !ok {
		return 0, false
	}
	return at.Sub(t.Start), true
}

// Validate checks that reached milestones are in order: a later milestone
// never happens before an earlier one, and none before Start. A violation
// means the harness measured something wrong, so it is an error.
func (t *ClaimTrace) Validate() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, prevName := t.Start, "start"
	for _, m := range Milestones {
		at, ok := t.At[m]
		if !ok {
			continue
		}
		if at.Before(prev) {
			return fmt.Errorf("claim %s: milestone %s (%s) before %s (%s)", t.Name, m, at.Format(time.RFC3339Nano), prevName, prev.Format(time.RFC3339Nano))
		}
		prev, prevName = at, m
	}
	return nil
}

// MilestoneSummaries summarizes time-from-start per milestone over traces.
func MilestoneSummaries(traces []*ClaimTrace) map[string]Summary {
	out := map[string]Summary{}
	for _, m := range Milestones {
		var ds []time.Duration
		for _, t := range traces {
			if d, ok := t.Since(m); ok {
				ds = append(ds, d)
			}
		}
		if len(ds) > 0 {
			out[m] = Summarize(ds)
		}
	}
	return out
}

// StepSummaries summarizes the time between consecutive milestones each
// trace reached ("start→created", "created→bound", ...): where the time
// to a milestone goes. Each reached milestone is measured from the
// previous one the same trace reached.
func StepSummaries(traces []*ClaimTrace) map[string]Summary {
	steps := map[string][]time.Duration{}
	for _, t := range traces {
		t.mu.Lock()
		prev, prevName := t.Start, "start"
		for _, m := range Milestones {
			at, ok := t.At[m]
			if !ok {
				continue
			}
			k := prevName + "→" + m
			steps[k] = append(steps[k], at.Sub(prev))
			prev, prevName = at, m
		}
		t.mu.Unlock()
	}
	out := map[string]Summary{}
	for k, ds := range steps {
		out[k] = Summarize(ds)
	}
	return out
}

// StepOrder returns the keys of steps in milestone order.
func StepOrder(steps map[string]Summary) []string {
	pos := map[string]int{"start": -1}
	for i, m := range Milestones {
		pos[m] = i
	}
	keys := make([]string, 0, len(steps))
	for k := range steps {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ai, aj := strings.Split(keys[i], "→"), strings.Split(keys[j], "→")
		if pos[ai[1]] != pos[aj[1]] {
			return pos[ai[1]] < pos[aj[1]]
		}
		return pos[ai[0]] < pos[aj[0]]
	})
	return keys
}

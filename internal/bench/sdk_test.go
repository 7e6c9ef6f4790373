package bench

import (
	"strings"
	"testing"
	"time"
)

// Steps are measured between the milestones each trace reached, in
// milestone order, skipping the ones it did not reach.
func TestStepSummaries(t *testing.T) {
	t0 := time.Unix(0, 0)
	a := NewTrace("a", t0)
	a.Mark(Created, t0.Add(5*time.Millisecond))
	a.Mark(Ready, t0.Add(30*time.Millisecond))
	a.Mark(FirstOutput, t0.Add(70*time.Millisecond))
	b := NewTrace("b", t0)
	b.Mark(Created, t0.Add(7*time.Millisecond))
	b.Mark(Bound, t0.Add(20*time.Millisecond))
	b.Mark(Ready, t0.Add(21*time.Millisecond))
	steps := StepSummaries([]*ClaimTrace{a, b})
	want := map[string][]time.Duration{
		"start→created":      {5 * time.Millisecond, 7 * time.Millisecond},
		"created→ready":      {25 * time.Millisecond},
		"ready→first_output": {40 * time.Millisecond},
		"created→bound":      {13 * time.Millisecond},
		"bound→ready":        {time.Millisecond},
	}
	if len(steps) != len(want) {
		t.Fatalf("steps %v", steps)
	}
	for k, ds := range want {
		if s := steps[k]; s.Count != len(ds) || s.Min != ds[0] || s.Max != ds[len(ds)-1] {
			t.Errorf("%s: %+v, want %v", k, s, ds)
		}
	}
	order := strings.Join(StepOrder(steps), " ")
	if order != "start→created created→bound created→ready bound→ready ready→first_output" {
		t.Errorf("order: %s", order)
	}
}

// The SDK's span names map to milestones whatever the service prefix.
func TestMilestoneOfSpan(t *testing.T) {
	for name, want := range map[string]string{
		"sandbox-client.create_claim":           Created,
		"svc.resolve_sandbox_name":              Bound,
		"sandbox-client.wait_for_sandbox_ready": Ready,
		"sandbox-client.connect":                Connected,
		"sandbox-client.dev_mode_tunnel":        Connected,
		"sandbox-client.wait_for_gateway":       Connected,
		"sandbox-client.sandboxd_pod_tunnel":    Connected,
		"sandbox-client.run":                    "",
		"lifecycle":                             "",
	} {
		got, ok := milestoneOfSpan(name)
		if got != want || ok != (want != "") {
			t.Errorf("milestoneOfSpan(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

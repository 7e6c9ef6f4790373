package bench

import (
	"time"

	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func traceStatus(ready metav1.ConditionStatus, reason string, scheduled metav1.ConditionStatus, node string) sandboxv1beta1.SandboxStatus {
	return sandboxv1beta1.SandboxStatus{NodeName: node, Conditions: []metav1.Condition{
		{Type: sandboxv1beta1.SandboxConditionReady, Status: ready, Reason: reason},
		{Type: sandboxv1beta1.SandboxConditionPodScheduled, Status: scheduled, Reason: "PodScheduled"},
	}}
}

// The trace counts status-changing versions per Sandbox and by transition,
// and tells the not-ready rewrites (a write between the first status and
// Ready) from the rest.
func TestStatusTraceAttributes(t *testing.T) {
	tr := &StatusTrace{last: map[string]*sandboxv1beta1.SandboxStatus{}, seen: map[string]int{}, transitions: map[string]int{}}
	sb := func(uid string, s sandboxv1beta1.SandboxStatus) *sandboxv1beta1.Sandbox {
		x := &sandboxv1beta1.Sandbox{Status: s}
		x.UID = types.UID("u" + uid)
		return x
	}
	unknown := traceStatus("False", "DependenciesNotReady", "Unknown", "")
	placed := traceStatus("False", "DependenciesNotReady", "True", "n1")
	ready := traceStatus("True", "DependenciesReady", "True", "n1")
	// Sandbox a: created, first status, placed, Ready (3 writes, 1 rewrite).
	tr.observe(watch.Added, sb("a", sandboxv1beta1.SandboxStatus{}))
	for _, s := range []sandboxv1beta1.SandboxStatus{unknown, placed, ready} {
		tr.observe(watch.Modified, sb("a", s))
	}
	// Sandbox b: created, Ready at once, then a metadata-only version.
	tr.observe(watch.Added, sb("b", sandboxv1beta1.SandboxStatus{}))
	tr.observe(watch.Modified, sb("b", ready))
	tr.observe(watch.Modified, sb("b", ready))
	tr.cancel, tr.done = func() {}, make(chan struct{})
	close(tr.done)
	r, err := tr.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if r.Changes != 4 || r.NotReadyRewrites != 1 || r.MetadataOnly != 1 {
		t.Errorf("changes %d, not-ready rewrites %d, metadata-only %d; want 4, 1, 1:\n%s", r.Changes, r.NotReadyRewrites, r.MetadataOnly, r)
	}
	if r.PerSandbox[3] != 1 || r.PerSandbox[1] != 1 {
		t.Errorf("per Sandbox %v, want one with 3 and one with 1", r.PerSandbox)
	}
	want := "Ready=False/DependenciesNotReady,PodScheduled=Unknown/PodScheduled -> Ready=False/DependenciesNotReady,PodScheduled=True/PodScheduled [nodeName]"
	if r.Transitions[want] != 1 {
		t.Errorf("transition %q not counted once:\n%s", want, r)
	}
}

// A claim seen bound on the watch before its create response arrived was
// created by then: the trace stays in order.
func TestMarkCreatedAfterBound(t *testing.T) {
	t0 := time.Unix(100, 0)
	tr := NewTrace("c", t0)
	tr.Mark(Bound, t0.Add(time.Millisecond))
	tr.MarkCreated(t0.Add(5 * time.Millisecond))
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if d, _ := tr.Since(Created); d != time.Millisecond {
		t.Errorf("created at %v, want the bound milestone's 1ms", d)
	}
	tr2 := NewTrace("d", t0)
	tr2.MarkCreated(t0.Add(5 * time.Millisecond))
	if d, _ := tr2.Since(Created); d != 5*time.Millisecond {
		t.Errorf("created at %v, want the response's 5ms", d)
	}
}

package bench

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// The claim watch can deliver a bound claim before the create call's
// response is handled; the trace must stay ordered (created no later than
// bound) instead of failing the run.
func TestWatchBeforeCreateResponseKeepsMilestonesOrdered(t *testing.T) {
	tr := newTracker()
	trace := tr.add("c")
	bound := time.Now()
	claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	claim.Status.SandboxStatus.Name = "sb"
	tr.observe(claim, bound)
	tr.mark("c", Created, bound.Add(time.Millisecond)) // the response, later
	if err := trace.Validate(); err != nil {
		t.Fatal(err)
	}
	created, _ := trace.Since(Created)
	b, _ := trace.Since(Bound)
	if created > b {
		t.Fatalf("created %v after bound %v", created, b)
	}
}

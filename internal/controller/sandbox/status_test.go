package sandbox

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func st(readyStatus metav1.ConditionStatus, reason string, mut func(*sandboxv1beta1.SandboxStatus)) *sandboxv1beta1.SandboxStatus {
	s := &sandboxv1beta1.SandboxStatus{Conditions: []metav1.Condition{
		{Type: "Suspended", Status: metav1.ConditionFalse, Reason: "NotSuspended"},
		{Type: "Ready", Status: readyStatus, Reason: reason},
	}}
	if mut != nil {
		mut(s)
	}
	return s
}

// The status patch is the wire format the write-budget tests count: the
// whole status, every key sorted (it goes through a map), fields set
// before and empty now sent as null (merge patch cannot clear a field by
// leaving it out), and no resourceVersion precondition: the Sandbox
// controller is the only writer of Sandbox status.
func TestStatusPatchBytes(t *testing.T) {
	at := metav1.Unix(500, 0)
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 7, LastTransitionTime: at, Reason: "DependenciesReady", Message: "ok"}
	const readyJSON = `{"lastTransitionTime":"1970-01-01T00:08:20Z","message":"ok","observedGeneration":7,"reason":"DependenciesReady","status":"True","type":"Ready"}`
	full := &sandboxv1beta1.SandboxStatus{
		ServiceFQDN: "s.ns.svc.cluster.local", Service: "s", Conditions: []metav1.Condition{ready},
		LabelSelector: "agents.x-k8s.io/sandbox-name-hash=h1", PodIPs: []string{"10.0.0.1", "fd00::1"}, NodeName: "n1",
		MemorySnapshot: &sandboxv1beta1.MemorySnapshot{ID: "uid", NodeName: "n1", SizeBytes: 4096, TakenAt: at},
	}
	conditionsOnly := &sandboxv1beta1.SandboxStatus{Conditions: []metav1.Condition{ready}}
	cases := []struct {
		name     string
		old, cur *sandboxv1beta1.SandboxStatus
		want     string
	}{
		{"empty", &sandboxv1beta1.SandboxStatus{}, &sandboxv1beta1.SandboxStatus{}, `{"status":{}}`},
		{"conditions only", &sandboxv1beta1.SandboxStatus{}, conditionsOnly, `{"status":{"conditions":[` + readyJSON + `]}}`},
		{"pod IPs and the rest", conditionsOnly, full, `{"status":{"conditions":[` + readyJSON + `],` +
			`"memorySnapshot":{"id":"uid","nodeName":"n1","sizeBytes":4096,"takenAt":"1970-01-01T00:08:20Z"},` +
			`"nodeName":"n1","podIPs":["10.0.0.1","fd00::1"],"selector":"agents.x-k8s.io/sandbox-name-hash=h1",` +
			`"service":"s","serviceFQDN":"s.ns.svc.cluster.local"}}`},
		{"cleared fields sent as null", full, conditionsOnly, `{"status":{"conditions":[` + readyJSON + `],` +
			`"memorySnapshot":null,"nodeName":null,"podIPs":null,"selector":null,"service":null,"serviceFQDN":null}}`},
		{"all cleared", full, &sandboxv1beta1.SandboxStatus{}, `{"status":{"conditions":null,` +
			`"memorySnapshot":null,"nodeName":null,"podIPs":null,"selector":null,"service":null,"serviceFQDN":null}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := statusPatchBytes(t, c.old, c.cur); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// statusPatchBytes renders statusMergePatch.
func statusPatchBytes(t *testing.T, old, cur *sandboxv1beta1.SandboxStatus) string {
	t.Helper()
	p, err := statusMergePatch(old, cur)
	if err != nil {
		t.Fatal(err)
	}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestWritePolicyPredicates(t *testing.T) {
	notReady := st("False", "DependenciesNotReady", nil)
	withNode := st("False", "DependenciesNotReady", func(s *sandboxv1beta1.SandboxStatus) { s.NodeName = "n" })
	if !nodeNameOnlyChange(notReady, withNode) {
		t.Errorf("nodeName-only change not detected")
	}
	if nodeNameOnlyChange(notReady, st("True", "DependenciesReady", nil)) {
		t.Errorf("a Ready change is not nodeName-only")
	}
	if !refinesNotReady(notReady, withNode) {
		t.Errorf("not-ready refinement not detected")
	}
	for name, cur := range map[string]*sandboxv1beta1.SandboxStatus{
		"becomes ready":  st("True", "DependenciesReady", nil),
		"error":          st("False", "ReconcilerError", nil),
		"suspend starts": st("False", "DependenciesNotReady", func(s *sandboxv1beta1.SandboxStatus) { s.Conditions[0].Reason = "PodTerminating" }),
	} {
		if refinesNotReady(notReady, cur) {
			t.Errorf("%s must be written at once", name)
		}
	}
	if !refinesNotReady(&sandboxv1beta1.SandboxStatus{}, notReady) {
		t.Errorf("a new sandbox's first not-ready status may wait for the window")
	}
	if refinesNotReady(&sandboxv1beta1.SandboxStatus{}, st("False", "ReconcilerError", nil)) {
		t.Errorf("a new sandbox's first error must be written at once")
	}
}

func TestWriteClock(t *testing.T) {
	c := newWriteClock()
	key := types.NamespacedName{Namespace: "n", Name: "s"}
	t0 := time.Unix(100, 0)
	if w := c.wait(key, t0, time.Second); w != time.Second {
		t.Errorf("first sighting waits the window, got %v", w)
	}
	if w := c.wait(key, t0.Add(400*time.Millisecond), time.Second); w != 600*time.Millisecond {
		t.Errorf("redelivery must not re-arm, got %v", w)
	}
	if w := c.wait(key, t0.Add(1100*time.Millisecond), time.Second); w > 0 {
		t.Errorf("past the window must be due, got %v", w)
	}
	c.forget(key)
	if w := c.wait(key, t0.Add(2*time.Second), time.Second); w != time.Second {
		t.Errorf("forget must reset, got %v", w)
	}

	written := st("True", "DependenciesReady", nil)
	caughtUp := func(rv string) bool {
		sb := makeSandbox("n", "s").obj()
		sb.ResourceVersion = rv
		c.catchUp(sb)
		return len(sb.Status.Conditions) == 2 && sb.Status.Conditions[1].Reason == "DependenciesReady"
	}
	// Our pass read 5, another writer made 6 (a label), our patch made 7.
	c.remember(key, "5", "7", written)
	if !caughtUp("5") {
		t.Errorf("the version the write was computed from must show the written status")
	}
	if !caughtUp("6") {
		t.Errorf("a version between our read and our write must show the written status (else the change is computed and announced twice)")
	}
	if caughtUp("7") || caughtUp("6") {
		t.Errorf("once the cache reached our write, every version keeps its own status")
	}
	c.remember(key, "5", "7", written)
	if caughtUp("9") || caughtUp("5") {
		t.Errorf("a version newer than our write keeps its own status, and ends the catch-up")
	}
	// Resource versions that are not integers: only the version read counts.
	c.remember(key, "a5", "a7", written)
	if !caughtUp("a5") || caughtUp("a6") {
		t.Errorf("non-integer versions: only the version read predates the write")
	}
}

func TestExpiredAndMarkExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	sb := makeSandbox("n", "s").obj()
	if expired(sb, now) {
		t.Errorf("no shutdownTime never expires")
	}
	sb = makeSandbox("n", "s").shutdownAt(now.Add(time.Second), sandboxv1beta1.ShutdownPolicyRetain).obj()
	if expired(sb, now) || !expired(sb, now.Add(time.Second)) {
		t.Errorf("expiry must start exactly at shutdownTime")
	}
	sb.Status.Conditions = []metav1.Condition{
		{Type: "PodScheduled", Status: "True", Reason: "PodScheduled"},
		{Type: "Finished", Status: "True", Reason: "PodSucceeded"},
	}
	markExpired(sb)
	if condition(sb, "PodScheduled") != nil || condition(sb, "Finished") == nil {
		t.Errorf("expiry must drop PodScheduled and keep Finished: %+v", sb.Status.Conditions)
	}
	if c := condition(sb, "Ready"); c == nil || c.Reason != "SandboxExpired" || c.Message != "Sandbox has expired" {
		t.Errorf("Ready = %+v", c)
	}
}

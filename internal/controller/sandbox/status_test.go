package sandbox

import (
	"encoding/json"
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

func TestStatusMergePatchClearsFields(t *testing.T) {
	old := st("True", "DependenciesReady", func(s *sandboxv1beta1.SandboxStatus) { s.PodIPs = []string{"1.2.3.4"}; s.NodeName = "n" })
	cur := st("False", "SandboxSuspended", nil)
	data, err := statusMergePatch(old, cur)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"podIPs", "nodeName"} {
		if v, ok := m["status"][k]; !ok || v != nil {
			t.Errorf("%s must be sent as null, got %v (present %v)", k, v, ok)
		}
	}
	if _, ok := m["status"]["conditions"]; !ok {
		t.Errorf("conditions missing from patch")
	}
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

	sb := makeSandbox("n", "s").obj()
	sb.ResourceVersion = "5"
	written := st("True", "DependenciesReady", nil)
	c.remember(key, "5", written)
	c.catchUp(sb)
	if len(sb.Status.Conditions) != 2 || sb.Status.Conditions[1].Reason != "DependenciesReady" {
		t.Errorf("stale cache not caught up: %+v", sb.Status)
	}
	sb2 := makeSandbox("n", "s").obj()
	sb2.ResourceVersion = "7"
	c.catchUp(sb2)
	if len(sb2.Status.Conditions) != 0 {
		t.Errorf("a newer object must keep its own status")
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

package sandbox

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// The tests here force the race the expectations exist for: a pass that
// runs after the controller wrote a child but before its informer shows
// the write. The manager's watch of the child's resource is held (see
// watchGates), the Sandbox is woken again, and only then is the watch let
// go. Every write request is counted on the wire, failed ones included.

// childWrites counts the requests of verb to resource in namespace ns.
func childWrites(ns, verb, resource string) int {
	n := 0
	for _, w := range writes.Writes() {
		if w.Namespace == ns && w.Verb == verb && w.Resource == resource {
			n++
		}
	}
	return n
}

// touch changes a label of the Sandbox, which wakes the controller, and
// returns the resourceVersion the pass it wakes reads (or a later one).
func touch(t *testing.T, ns, name string) int64 {
	t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"touch":"%d"}}}`, time.Now().UnixNano())
	if err := k8s.Patch(ctxT(t), sb, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("touching sandbox: %v", err)
	}
	return mustRV(sb.ResourceVersion)
}

// waitPassSaw waits until a pass of the Sandbox that read rv or a later
// version of it has finished.
func waitPassSaw(t *testing.T, ns, name string, rv int64) {
	t.Helper()
	key := types.NamespacedName{Namespace: ns, Name: name}
	eventually(t, 30*time.Second, "a pass that saw the touch", func() (bool, error) {
		for _, p := range passesOf(key) {
			if p.sawRV >= rv {
				return true, nil
			}
		}
		return false, nil
	})
}

// lagRace holds the manager's watches of resources, runs act (which makes
// the controller send verb on resources[0]), waits for that request, wakes
// the Sandbox again so a pass runs on a cache that does not show it, and
// releases the watches. It returns how many such passes failed.
func lagRace(t *testing.T, ns, name, verb string, resources []string, act func()) int {
	t.Helper()
	for _, r := range resources {
		release := watches.hold(t, r)
		defer release()
	}
	before := childWrites(ns, verb, resources[0])
	act()
	eventually(t, 30*time.Second, verb+" "+resources[0], func() (bool, error) {
		n := childWrites(ns, verb, resources[0])
		return n > before, fmt.Errorf("%d requests", n-before)
	})
	rv := touch(t, ns, name)
	waitPassSaw(t, ns, name, rv)
	failed := 0
	for _, p := range passesOf(types.NamespacedName{Namespace: ns, Name: name}) {
		if p.sawRV >= rv && p.failed {
			failed++
		}
	}
	return failed
}

// Race: a Sandbox reconciled again before its informer has shown the Pod,
// Service and PVC the first pass created creates each exactly once (it
// used to create them again, get AlreadyExists and fail the pass).
func TestChildrenCreatedOnceWhileCacheLags(t *testing.T) {
	ns := newNamespace(t)
	name := "lagged"
	var sb *sandboxv1beta1.Sandbox
	failed := lagRace(t, ns, name, "create", []string{"pods", "services", "persistentvolumeclaims"}, func() {
		sb = makeSandbox(ns, name).service(true).vct("data").create(t)
	})
	if failed != 0 {
		t.Errorf("%d passes on the lagging cache failed", failed)
	}
	waitCondition(t, ns, name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	waitSettled(t, ns, name)
	t.Logf("writes: %d status patches, %d pod creates", childWrites(ns, "patch", "sandboxes/status"), childWrites(ns, "create", "pods"))
	for _, res := range []string{"pods", "services", "persistentvolumeclaims"} {
		if n := childWrites(ns, "create", res); n != 1 {
			t.Errorf("%d create requests for %s, want exactly 1", n, res)
		}
	}
	if p := pendingWrites(ns, name, sb.UID); len(p) != 0 {
		t.Errorf("expectations left pending after settling: %v", p)
	}
}

// Race: a pass on a cache that still shows the Pod the previous pass
// deleted to suspend does not delete it again.
func TestSuspendDeletesPodOnceWhileCacheLags(t *testing.T) {
	ns := newNamespace(t)
	name := "lagged-suspend"
	makeSandbox(ns, name).create(t)
	waitCondition(t, ns, name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	waitSettled(t, ns, name)
	failed := lagRace(t, ns, name, "delete", []string{"pods"}, func() {
		setMode(t, ns, name, sandboxv1beta1.OperatingModeSuspended)
	})
	if failed != 0 {
		t.Errorf("%d passes on the lagging cache failed", failed)
	}
	waitCondition(t, ns, name, "Suspended", metav1.ConditionTrue, sandboxv1beta1.ReasonPodTerminated)
	waitSettled(t, ns, name)
	if n := childWrites(ns, "delete", "pods"); n != 1 {
		t.Errorf("%d delete requests for the Pod, want exactly 1", n)
	}
	suspending := 0
	for _, e := range eventsFor(t, ns, name) {
		if e.Reason == "Suspending" {
			suspending++
		}
	}
	if suspending != 1 {
		t.Errorf("%d Suspending events, want 1", suspending)
	}
}

// Race: turning the Service off deletes it once, however often the
// Sandbox is reconciled before the cache shows the delete.
func TestServiceDeletedOnceWhileCacheLags(t *testing.T) {
	ns := newNamespace(t)
	name := "lagged-svc"
	makeSandbox(ns, name).service(true).create(t)
	waitCondition(t, ns, name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	waitSettled(t, ns, name)
	failed := lagRace(t, ns, name, "delete", []string{"services"}, func() {
		sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if err := k8s.Patch(ctxT(t), sb, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"service":false}}`))); err != nil {
			t.Fatal(err)
		}
	})
	if failed != 0 {
		t.Errorf("%d passes on the lagging cache failed", failed)
	}
	eventually(t, 30*time.Second, "status without the Service", func() (bool, error) {
		s := getSandbox(t, ns, name)
		return s.Status.Service == "", fmt.Errorf("status.service = %q", s.Status.Service)
	})
	waitSettled(t, ns, name)
	if n := childWrites(ns, "delete", "services"); n != 1 {
		t.Errorf("%d delete requests for the Service, want exactly 1", n)
	}
}

// A create that collides with our own Pod the cache has not shown (the
// expectation timed out: a lost event, or a cache lagging past the
// timeout) is a success, not a failed pass: the owner UID on the Pod read
// from the apiserver says it is ours.
func TestCreateCollidingWithOwnPodSucceeds(t *testing.T) {
	ns := newNamespace(t)
	name := "collide-own"
	// Every expectation times out at once from the controller's view; the
	// clock is put back before anything else runs (tests are sequential).
	shifted := func() time.Time { return time.Now().Add(2 * time.Hour) }
	failed := lagRace(t, ns, name, "create", []string{"pods"}, func() {
		makeSandbox(ns, name).create(t)
		eventually(t, 30*time.Second, "the first Pod create", func() (bool, error) {
			return childWrites(ns, "create", "pods") == 1, nil
		})
		setExpectationsClock(shifted)
		t.Cleanup(func() { setExpectationsClock(time.Now) })
	})
	setExpectationsClock(time.Now)
	if failed != 0 {
		t.Errorf("%d passes that collided with their own Pod failed", failed)
	}
	if n := childWrites(ns, "create", "pods"); n != 2 {
		t.Fatalf("%d Pod creates; the test needs the pass after the timeout to collide once", n)
	}
	waitCondition(t, ns, name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	waitSettled(t, ns, name)
	if n := childWrites(ns, "create", "pods"); n != 2 {
		t.Errorf("%d Pod creates after the collision: the pass that found its own Pod must wait for the cache", n)
	}
}

// A create that collides with someone else's Pod the cache has not shown
// keeps the old outcome: reported in status, the Pod left alone, no
// second Pod.
func TestCreateCollidingWithForeignPodIsReported(t *testing.T) {
	ns := newNamespace(t)
	name := "collide-foreign"
	var foreign *corev1.Pod
	lagRace(t, ns, name, "create", []string{"pods"}, func() {
		foreign = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "other"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		if err := k8s.Create(ctxT(t), foreign); err != nil {
			t.Fatal(err)
		}
		makeSandbox(ns, name).create(t)
	})
	got := waitCondition(t, ns, name, "Ready", metav1.ConditionFalse, sandboxv1beta1.ReasonReconcilerError)
	if msg := condition(got, "Ready").Message; !strings.Contains(msg, "cannot adopt unowned pod") {
		t.Errorf("Ready message = %q, want the refusal to adopt", msg)
	}
	p, err := getPod(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != foreign.UID || len(p.OwnerReferences) != 0 {
		t.Errorf("foreign pod must be left alone: uid %s (was %s), owners %+v", p.UID, foreign.UID, p.OwnerReferences)
	}
	var pods corev1.PodList
	if err := k8s.List(ctxT(t), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Errorf("%d pods, want only the foreign one", len(pods.Items))
	}
}

package claim

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// The wait line on the real apiserver: the fixture plays the pool
// controller (it creates and vouches for members) and the Sandbox
// controller (it gives members their pod IP), the claim Reconciler runs
// pass by pass.

// starting creates n vouched members without a pod IP and waits until the
// queue holds them.
func (f *fixture) starting(tmpl *extv1beta1.SandboxTemplate, pool *extv1beta1.SandboxWarmPool, names ...string) map[string]*sandboxv1beta1.Sandbox {
	f.t.Helper()
	out := map[string]*sandboxv1beta1.Sandbox{}
	for _, n := range names {
		out[n] = f.vouch(pool, tmpl, f.member(n, tmpl, pool, false, "", nil))
	}
	f.queued(func(cs []Candidate) bool { return len(cs) >= len(names) })
	return out
}

// networked gives sb a pod IP, as the Sandbox controller does when its Pod
// gets one, and waits until the queue has seen it.
func (f *fixture) networked(sb *sandboxv1beta1.Sandbox, ip string) {
	f.t.Helper()
	sb.Status.PodIPs = []string{ip}
	if err := env.Client.Status().Update(context.Background(), sb); err != nil {
		f.t.Fatal(err)
	}
	f.cachedObj(sb)
	f.queued(func(cs []Candidate) bool {
		for _, c := range cs {
			if c.Name == sb.Name {
				return c.HasIPs
			}
		}
		return false
	})
}

func (f *fixture) queued(ok func([]Candidate) bool) {
	f.t.Helper()
	eventually(f.t, func() error {
		if cs := f.r.queue.Snapshot(PoolKey(f.ns, "pool")); !ok(cs) {
			return fmt.Errorf("queue not there yet: %+v", cs)
		}
		return nil
	})
}

// mustWait reconciles the claim and fails unless the pass waited without
// binding anything.
func (f *fixture) mustWait(name string) {
	f.t.Helper()
	res := f.mustReconcile(name)
	if res.RequeueAfter <= 0 {
		f.t.Fatalf("%s did not wait (bound %q)", name, f.bound(name))
	}
	if got := f.bound(name); got != "" {
		f.t.Fatalf("%s bound %q while it should wait", name, got)
	}
	f.noSandbox(name)
}

func (f *fixture) noSandbox(name string) {
	f.t.Helper()
	var sb sandboxv1beta1.Sandbox
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &sb); !apierrors.IsNotFound(err) {
		f.t.Fatalf("cold sandbox %q exists (err %v)", name, err)
	}
}

// Waiters take the members that come up in the order the claims arrived,
// whatever order the members come up in and whatever order the claims are
// woken in, and the wait costs no write.
func TestWaitersTakeStartingMembersInArrivalOrder(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	m := f.starting(tmpl, pool, "m1", "m2", "m3")
	for _, c := range []string{"c1", "c2", "c3"} {
		f.claim(c)
		f.mustWait(c)
	}
	if n := len(f.writes.Writes()); n != 0 {
		t.Fatalf("%d writes while waiting: %v", n, f.writes.Writes())
	}
	if got := f.r.queue.Waiting(PoolKey(f.ns, "pool")); len(got) != 3 || got[0].Name != "c1" || got[2].Name != "c3" {
		t.Fatalf("line %v", got)
	}
	// The youngest member comes up first and the last claim is woken
	// first: it must not overtake c1 and c2.
	f.networked(m["m3"], "10.0.0.3")
	f.mustWait("c3")
	f.mustWait("c2")
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "m3" {
		t.Fatalf("c1 bound %q, want m3", got)
	}
	f.networked(m["m1"], "10.0.0.1")
	f.mustWait("c3")
	f.mustReconcile("c2")
	f.networked(m["m2"], "10.0.0.2")
	f.mustReconcile("c3")
	want := map[string]string{"c1": "m3", "c2": "m1", "c3": "m2"}
	for c, sb := range want {
		if got := f.bound(c); got != sb {
			t.Errorf("%s bound %q, want %q", c, got, sb)
		}
	}
	// The same two writes per claim as any warm claim: adoption patch and
	// status.
	if n, p, s := len(f.writes.Writes()), f.writes.Count("patch", "sandboxes"), len(f.writes.Writes())-f.writes.Count("patch", "sandboxes"); n != 6 || p != 3 || s != 3 {
		t.Fatalf("%d writes (%d sandbox patches), want 3 adoption patches + 3 status writes: %v", n, p, f.writes.Writes())
	}
	if got := f.r.queue.Waiting(PoolKey(f.ns, "pool")); len(got) != 0 {
		t.Fatalf("bound claims still in line: %v", got)
	}
}

// While as many members are starting as claims wait, none of them goes
// cold, however long the pods take (within the bound); the one claim more
// than there are starting members goes cold at once.
func TestNoColdSandboxWhileEnoughMembersStart(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	m := f.starting(tmpl, pool, "m1", "m2")
	f.claim("c1")
	f.claim("c2")
	f.mustWait("c1")
	f.mustWait("c2")
	f.claim("c3")
	if res := f.mustReconcile("c3"); res.RequeueAfter != 0 {
		t.Fatalf("c3 waits (%s) with both starting members spoken for", res.RequeueAfter)
	}
	if got := f.bound("c3"); got != "c3" {
		t.Fatalf("c3 bound %q, want its own cold sandbox", got)
	}
	// Pods are slow on a busy node: ten seconds later both still wait.
	f.now = time.Now().Add(10 * time.Second)
	f.mustWait("c1")
	f.mustWait("c2")
	f.networked(m["m2"], "10.0.0.2")
	f.networked(m["m1"], "10.0.0.1")
	f.mustReconcile("c2")
	f.mustReconcile("c1")
	if a, b := f.bound("c1"), f.bound("c2"); a != "m2" || b != "m1" {
		t.Fatalf("bound c1=%q c2=%q, want m2, m1", a, b)
	}
}

// A pool that cannot refill for the claim sends it cold at once: a member
// whose Pod failed, a member stuck starting past the bound, and a member a
// tenant planted (controlled, by its references, by the live pool, but
// never created by the pool controller) are not on their way.
func TestColdAtOnceWhenThePoolCannotRefill(t *testing.T) {
	f := newFixture(t, Options{WarmWait: 20 * time.Second})
	tmpl, pool := f.setup("")
	failed := f.vouch(pool, tmpl, f.member("failed", tmpl, pool, false, "", nil))
	meta.SetStatusCondition(&failed.Status.Conditions, metav1.Condition{Type: sandboxv1beta1.SandboxConditionReady,
		Status: metav1.ConditionFalse, Reason: sandboxv1beta1.ReasonPodFailed, Message: "Pod failed"})
	if err := env.Client.Status().Update(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	f.cachedObj(failed)
	f.member("planted", tmpl, pool, false, "", nil) // not vouched
	f.queued(func(cs []Candidate) bool {
		for _, c := range cs {
			if c.Name == "failed" && c.Failed {
				return len(cs) == 2
			}
		}
		return false
	})
	f.claim("c1")
	if res := f.mustReconcile("c1"); res.RequeueAfter != 0 {
		t.Fatalf("waited %s for a failed or planted member", res.RequeueAfter)
	}
	if got := f.bound("c1"); got != "c1" {
		t.Fatalf("c1 bound %q, want cold", got)
	}

	// A genuine member that has been starting for longer than the bound.
	f.starting(tmpl, pool, "stuck")
	f.now = time.Now().Add(21 * time.Second)
	f.claim("c2")
	if res := f.mustReconcile("c2"); res.RequeueAfter != 0 {
		t.Fatalf("waited %s for a member stuck past the bound", res.RequeueAfter)
	}
	if got := f.bound("c2"); got != "c2" {
		t.Fatalf("c2 bound %q, want cold", got)
	}
}

// A waiting claim that is deleted gives its place to the next claim, which
// then waits for the member instead of going cold, and takes it.
func TestDeletedWaiterReleasesItsPlace(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	m := f.starting(tmpl, pool, "m1")
	f.claim("c1")
	f.mustWait("c1")
	c1 := f.getClaim("c1")
	if err := env.Client.Delete(context.Background(), c1); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		var c extv1beta1.SandboxClaim
		if err := f.cached.Get(context.Background(), client.ObjectKeyFromObject(c1), &c); !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim still cached (%v)", err)
		}
		return nil
	})
	f.mustReconcile("c1") // the pass of the deletion
	if got := f.r.queue.Waiting(PoolKey(f.ns, "pool")); len(got) != 0 {
		t.Fatalf("deleted claim still in line: %v", got)
	}
	f.claim("c2")
	f.mustWait("c2")
	f.now = time.Now().Add(5 * time.Second)
	f.mustWait("c2")
	f.networked(m["m1"], "10.0.0.1")
	f.mustReconcile("c2")
	if got := f.bound("c2"); got != "m1" {
		t.Fatalf("c2 bound %q, want m1", got)
	}
}

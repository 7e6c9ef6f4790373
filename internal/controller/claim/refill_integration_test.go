package claim

import (
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/refill"
)

// Counting the pool's refill still to be created, on the real apiserver:
// the fixture plays the pool controller (it reports the pool as refilling
// in the registry, creates and vouches for members later) and the Sandbox
// controller (pod IPs).

// While the pool refills, as many claims as the pool lacks members wait
// for members it has not even created yet, in arrival order and without a
// write; the one claim more goes cold at once. The members the pool then
// creates go to the waiters, two writes each, and nobody owns two
// Sandboxes.
func TestWaitersCountTheRefillStillToCreate(t *testing.T) {
	reg := refill.NewRegistry()
	f := newFixture(t, Options{Refills: reg})
	tmpl, pool := f.setup("") // spec.replicas 3, no member yet
	reg.Set(pool.UID, "")
	for _, c := range []string{"c1", "c2", "c3"} {
		f.claim(c)
		f.mustWait(c)
	}
	if n := len(f.writes.Writes()); n != 0 {
		t.Fatalf("%d writes while waiting: %v", n, f.writes.Writes())
	}
	f.claim("c4")
	if res := f.mustReconcile("c4"); res.RequeueAfter != 0 {
		t.Fatalf("c4 waits (%s) with the whole deficit spoken for", res.RequeueAfter)
	}
	if got := f.bound("c4"); got != "c4" {
		t.Fatalf("c4 bound %q, want its own cold sandbox", got)
	}
	coldWrites := len(f.writes.Writes())

	// The pool creates its three members; they come up last first.
	m := f.starting(tmpl, pool, "m1", "m2", "m3")
	f.mustWait("c1")
	f.networked(m["m3"], "10.0.0.3")
	f.mustWait("c3")
	f.mustReconcile("c1")
	f.networked(m["m1"], "10.0.0.1")
	f.networked(m["m2"], "10.0.0.2")
	f.mustReconcile("c2")
	f.mustReconcile("c3")
	want := map[string]string{"c1": "m3", "c2": "m1", "c3": "m2"}
	for c, sb := range want {
		if got := f.bound(c); got != sb {
			t.Errorf("%s bound %q, want %q", c, got, sb)
		}
		f.noSandbox(c)
	}
	w := f.writes.Writes()[coldWrites:]
	if p := f.writes.Count("patch", "sandboxes"); len(w) != 6 || p != 3 {
		t.Fatalf("%d writes for three waiters (%d sandbox patches), want 3 adoption patches + 3 status writes: %v", len(w), p, w)
	}
	if got := f.r.queue.Waiting(PoolKey(f.ns, "pool")); len(got) != 0 {
		t.Fatalf("bound claims still in line: %v", got)
	}
}

// The deficit counts only for a pool this process's pool controller
// reports, by UID, as refilling: not for a pool it never reported, not for
// one whose refill it reports blocked (a missing template, failing creates,
// a replenish delay), and not for an older pool of the same name.
func TestDeficitCountsOnlyForAPoolThatRefills(t *testing.T) {
	reg := refill.NewRegistry()
	f := newFixture(t, Options{Refills: reg})
	_, pool := f.setup("")
	cold := func(name string) {
		t.Helper()
		f.claim(name)
		if res := f.mustReconcile(name); res.RequeueAfter != 0 {
			t.Fatalf("%s waits (%s) for a refill that is not coming", name, res.RequeueAfter)
		}
		if got := f.bound(name); got != name {
			t.Fatalf("%s bound %q, want its own cold sandbox", name, got)
		}
	}
	cold("unreported")
	reg.Set("uid-of-a-deleted-pool-of-the-same-name", "")
	cold("other-uid")
	reg.Set(pool.UID, "refills are held by --sandbox-warm-pool-replenish-delay")
	cold("blocked")
	// Reported as refilling: the next claim waits.
	reg.Set(pool.UID, "")
	f.claim("waits")
	f.mustWait("waits")
}

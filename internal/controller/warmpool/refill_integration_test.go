package warmpool

import (
	"context"
	"strings"
	"testing"
	"time"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/refill"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func TestReplenishDelayDefersRefill(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{ReplenishDelay: 10 * time.Second})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p") // first observation: no hold
	if n := len(f.members("p")); n != 2 {
		t.Fatalf("%d members", n)
	}
	base := time.Now()
	f.now = base
	f.reconcile("p") // observes 2
	ms := f.members("p")
	if err := env.Client.Delete(context.Background(), &ms[0]); err != nil {
		t.Fatal(err)
	}
	f.settle("p")
	before := f.creates()
	res := f.reconcile("p")
	if f.creates() != before {
		t.Fatal("refilled during the replenish hold")
	}
	if res.RequeueAfter < 10*time.Second || res.RequeueAfter > 15*time.Second {
		t.Fatalf("RequeueAfter = %s, want the hold (10s, jittered)", res.RequeueAfter)
	}
	f.now = base.Add(11 * time.Second)
	f.reconcile("p")
	if f.creates() != before+1 {
		t.Fatal("no refill after the hold")
	}
}

func TestRefillRatePacesCreates(t *testing.T) {
	f := newFixture(t, Options{MaxRefillRate: 1})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 3))
	base := time.Now()
	f.now = base
	f.reconcile("p")
	if f.creates() != 1 {
		t.Fatalf("first pass created %d, want 1 (bucket of one second)", f.creates())
	}
	f.settle("p")
	// A create of ours is still unobserved (raised by hand here) when a
	// token arrives: the gate refuses, and the token must be refunded.
	f.now = base.Add(time.Second)
	f.r.exp.TryExpectCreations(f.key("p"), 1)
	f.reconcile("p")
	if f.creates() != 1 {
		t.Fatal("created past the expectations gate")
	}
	f.r.exp.Forget(f.key("p"))
	f.reconcile("p")
	if f.creates() != 2 {
		t.Fatalf("refunded token not used: %d creates", f.creates())
	}
	f.settle("p")
	res := f.reconcile("p")
	if f.creates() != 2 || res.RequeueAfter <= 0 || res.RequeueAfter > 1500*time.Millisecond {
		t.Fatalf("empty bucket: %d creates, RequeueAfter %s; want a timed wait for the next token", f.creates(), res.RequeueAfter)
	}
}

func TestTemplateEventsMapToPools(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewPool(f.ns, "a", "shared", 1), exttest.NewPool(f.ns, "b", "shared", 1), exttest.NewPool(f.ns, "c", "other", 1))
	reqs := f.r.poolsForTemplate(context.Background(), exttest.NewTemplate(f.ns, "shared"))
	got := map[string]bool{}
	for _, r := range reqs {
		got[r.Name] = true
	}
	if len(reqs) != 2 || !got["a"] || !got["b"] {
		t.Fatalf("template maps to %v, want pools a and b", reqs)
	}
}

// Every pass tells the claim controller (package refill) whether it
// refills the pool, by the pool's UID: yes while it can create members,
// no while its template is missing or a replenish delay holds refills, and
// nothing once the pool is gone.
func TestPassesReportWhetherThePoolRefills(t *testing.T) {
	testenv.SkipShort(t)
	reg := refill.NewRegistry()
	f := newFixture(t, Options{Refills: reg})
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	f.create(tmpl, exttest.NewPool(f.ns, "p", "tmpl", 1))
	f.converge("p")
	pool := f.pool("p")
	if ok, why := reg.Refilling(pool.UID); !ok {
		t.Fatalf("a pool with its template is not reported refilling: %q", why)
	}
	if err := env.Client.Delete(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	exttest.Eventually(t, 10e9, func() error {
		var got extv1beta1.SandboxTemplate
		return expectNotFound(f.c.Get(context.Background(), clientKey(f.ns, "tmpl"), &got))
	})
	f.reconcile("p")
	if ok, why := reg.Refilling(pool.UID); ok || !strings.Contains(why, "not found") {
		t.Fatalf("without its template: refilling %v (%q)", ok, why)
	}
	if err := env.Client.Delete(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	exttest.Eventually(t, 10e9, func() error {
		var got extv1beta1.SandboxWarmPool
		return expectNotFound(f.c.Get(context.Background(), clientKey(f.ns, "p"), &got))
	})
	f.reconcile("p")
	if ok, why := reg.Refilling(pool.UID); ok || why != "" {
		t.Fatalf("a deleted pool is still reported: %v %q", ok, why)
	}

	held := newFixture(t, Options{Refills: reg, ReplenishDelay: time.Minute})
	held.create(exttest.NewTemplate(held.ns, "tmpl"), exttest.NewPool(held.ns, "p", "tmpl", 1))
	held.converge("p")
	if ok, why := reg.Refilling(held.pool("p").UID); ok || !strings.Contains(why, "replenish-delay") {
		t.Fatalf("a pool whose refills are held: refilling %v (%q)", ok, why)
	}
}

package claim

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// By default the observability times live in memory: a warm claim costs
// the adoption patch and the status write, and nothing else.
func TestObservabilityAnnotationsInMemoryByDefault(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.claim("c1")
	f.mustReconcile("c1")
	c := f.getClaim("c1")
	for _, k := range []string{labels.ControllerFirstObservedAt, labels.ClaimFirstReadyAt} {
		if _, ok := c.Annotations[k]; ok {
			t.Errorf("annotation %s written by default", k)
		}
	}
	if n := f.writes.Count("patch", "sandboxclaims"); n != 0 {
		t.Errorf("%d claim metadata patches", n)
	}
}

// Opting in persists both, as the published controller does; opting out
// again with the disable flag wins.
func TestObservabilityAnnotationsPersistedWhenAsked(t *testing.T) {
	f := newFixture(t, Options{PersistObservabilityAnnotations: true})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.claim("c1")
	f.mustReconcile("c1")
	c := f.getClaim("c1")
	first, err := time.Parse(time.RFC3339Nano, c.Annotations[labels.ControllerFirstObservedAt])
	if err != nil || first.Nanosecond() == 0 {
		t.Errorf("controller-first-observed-at = %q (%v); want RFC3339Nano with sub-second precision", c.Annotations[labels.ControllerFirstObservedAt], err)
	}
	if _, err := time.Parse(time.RFC3339Nano, c.Annotations[labels.ClaimFirstReadyAt]); err != nil {
		t.Errorf("claim-first-ready-at = %q", c.Annotations[labels.ClaimFirstReadyAt])
	}

	g := newFixture(t, Options{PersistObservabilityAnnotations: true, DisableObservabilityAnnotations: true})
	tmpl, pool = g.setup("")
	g.member("a", tmpl, pool, true, "10.0.0.1", nil)
	g.claim("c1")
	g.mustReconcile("c1")
	if n := g.writes.Count("patch", "sandboxclaims"); n != 0 {
		t.Errorf("disable flag ignored: %d claim metadata patches", n)
	}
}

type recQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []types.NamespacedName
}

func (q *recQueue) Add(r reconcile.Request) { q.added = append(q.added, r.NamespacedName) }

// Pool events fan out only to unbound, live claims of that pool, and only
// for spec changes, creation and deletion; template creation wakes the
// claims of every pool using it.
func TestPoolAndTemplateEventMapping(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.claim("bound")
	f.mustReconcile("bound")
	f.cachedObj(f.getClaim("bound"))
	f.claim("waiting")
	other := exttest.NewClaim(f.ns, "other-pool", "elsewhere")
	f.create(other)

	h := f.r.poolHandler()
	ctx := context.Background()
	q := &recQueue{}
	newPool := pool.DeepCopy()
	newPool.Status.Replicas = 9 // status-only
	h.Update(ctx, event.UpdateEvent{ObjectOld: pool, ObjectNew: newPool}, q)
	if len(q.added) != 0 {
		t.Fatalf("status-only pool update enqueued %v", q.added)
	}
	newPool.Generation = pool.Generation + 1
	h.Update(ctx, event.UpdateEvent{ObjectOld: pool, ObjectNew: newPool}, q)
	if len(q.added) != 1 || q.added[0].Name != "waiting" {
		t.Fatalf("spec change enqueued %v, want only the unbound claim of the pool", q.added)
	}
	q.added = nil
	f.r.queue.Push(PoolKey(f.ns, "pool"), Candidate{Name: "x", Ready: true, HasIPs: true})
	h.Delete(ctx, event.DeleteEvent{Object: pool}, q)
	if f.r.queue.Len(PoolKey(f.ns, "pool")) != 0 {
		t.Fatal("deleted pool's queue kept")
	}
	if len(q.added) != 1 || q.added[0].Name != "waiting" {
		t.Fatalf("pool deletion enqueued %v", q.added)
	}

	reqs := f.r.claimsForTemplate(ctx, tmpl)
	names := map[string]bool{}
	for _, r := range reqs {
		names[r.Name] = true
	}
	if len(reqs) != 2 || !names["bound"] || !names["waiting"] {
		t.Fatalf("template creation maps to %v, want both claims of the pool", reqs)
	}
	_ = extv1beta1.ClaimReasonReconcilerError
}

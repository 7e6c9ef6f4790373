package warmpool

import (
	"context"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// staleLister answers every Sandbox List with an empty list: a cache that
// has seen none of the creates. Its reconciler is not wired to watch events
// either, so, as with a real lagging cache, nothing lowers its expectations.
type staleLister struct{ client.Client }

func (s staleLister) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*sandboxv1beta1.SandboxList); ok {
		return nil
	}
	return s.Client.List(ctx, list, opts...)
}

// TestStaleCacheNeverOverCreates is the over-creation scenario of the
// published controller (15 creates for replicas=3 over 5 stale passes):
// with the expectations gate, 5 passes from a cache that never shows the
// new members create exactly replicas, sequentially and concurrently.
func TestStaleCacheNeverOverCreates(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "seq", "tmpl", 3), exttest.NewPool(f.ns, "par", "tmpl", 3))

	stale := NewReconciler(staleLister{f.c}, nil, Options{})
	run := func(pool string) {
		if _, err := stale.Reconcile(context.Background(), reqFor(f.ns, pool)); err != nil {
			t.Error(err)
		}
	}
	for i := 0; i < 5; i++ {
		run("seq")
	}
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); run("par") }()
	}
	wg.Wait()
	for _, pool := range []string{"seq", "par"} {
		if got := len(f.members(pool)); got != 3 {
			t.Errorf("pool %s: %d sandboxes exist after 5 stale passes, want exactly 3", pool, got)
		}
	}
	if got := f.creates(); got != 6 {
		t.Errorf("%d creates, want 6", got)
	}
}

// The watch handler lowers expectations only for Sandboxes the pool
// controls; a Sandbox merely labelled for the pool proves nothing.
func TestHandlerLowersOnlyPoolOwned(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"))
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	key := f.key("p")
	f.r.exp.TryExpectCreations(key, 1)
	f.create(orphan(f, "unowned", tmpl, false)) // pool label, no owner
	f.create(exttest.NewPool(f.ns, "other", "tmpl", 0))
	exttest.Consistently(t, 300e6, func() error {
		if f.r.exp.Satisfied(key) {
			t.Fatal("an unowned labelled sandbox lowered the pool's expectations")
		}
		return nil
	})
	f.create(exttest.NewPool(f.ns, "p", "tmpl", 1))
	f.reconcile("p") // adopts the orphan: an update, not a create
	f.r.exp.Forget(key)
	before := f.creates()
	f.converge("p")
	if f.creates() != before {
		t.Fatal("pool with an adopted orphan created another member")
	}
}

// A delete that finds the member already gone clears its expectation at
// once, so the next pass is not blocked for the timeout.
func TestDeleteNotFoundClearsExpectation(t *testing.T) {
	f := newFixture(t, Options{})
	pool := exttest.NewPool(f.ns, "p", "tmpl", 1)
	f.create(pool)
	ghost := &sandboxv1beta1.Sandbox{}
	ghost.Namespace, ghost.Name, ghost.UID = f.ns, "ghost", "ghost-uid"
	ghost.OwnerReferences = append(ghost.OwnerReferences, ownerref.WarmPool(pool))
	deleted, failed, err := f.r.deleteMembers(context.Background(), f.key("p"), pool, []*sandboxv1beta1.Sandbox{ghost})
	if err != nil || len(deleted) != 1 || len(failed) != 0 {
		t.Fatalf("deleted=%d failed=%d err=%v", len(deleted), len(failed), err)
	}
	if !f.r.exp.Satisfied(f.key("p")) {
		t.Fatal("NotFound delete left an expectation behind")
	}
}

func TestAdoptedMemberRecognised(t *testing.T) {
	claimRef := metav1.OwnerReference{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxClaim", Name: "c", UID: "u", Controller: ptr.To(true)}
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool-abcde", GenerateName: "pool-",
		Labels: map[string]string{labels.LaunchType: "warm"}, OwnerReferences: []metav1.OwnerReference{claimRef}}}
	if p, ok := adoptedMember(sb); !ok || p.Name != "pool" || p.Namespace != "ns" {
		t.Fatalf("adopted member not recognised: %v %v", p, ok)
	}
	cold := sb.DeepCopy()
	cold.GenerateName, cold.Labels[labels.LaunchType] = "", "cold"
	if _, ok := adoptedMember(cold); ok {
		t.Fatal("a cold sandbox counted as a pool create")
	}
	unowned := sb.DeepCopy()
	unowned.OwnerReferences = nil
	if _, ok := adoptedMember(unowned); ok {
		t.Fatal("an unowned sandbox counted as a pool create")
	}
}

// hookLister runs hook right after each Sandbox List: the moment a watch
// event can slip in between listing the members and acting on the count.
type hookLister struct {
	client.Client
	hook func()
}

func (h hookLister) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := h.Client.List(ctx, list, opts...)
	if _, ok := list.(*sandboxv1beta1.SandboxList); ok && h.hook != nil {
		h.hook()
	}
	return err
}

// TestExpectationsReadBeforeListing is the race found by the 200-claim
// burst: the event of our last create arrives after the List (which
// misses that Sandbox) but before the gate is checked. The gate must be
// read before listing, or the pass creates the same member twice.
func TestExpectationsReadBeforeListing(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p")
	key := f.key("p")

	// One create of ours is in flight; the (stale) list does not show it,
	// and its event lands right after the List.
	f.r.exp.TryExpectCreations(key, 1)
	r := NewReconciler(hookLister{Client: staleOne{f.c}, hook: func() { f.r.exp.CreationObserved(key) }}, nil, Options{})
	r.exp = f.r.exp
	before := f.creates()
	if _, err := r.Reconcile(context.Background(), reqFor(f.ns, "p")); err != nil {
		t.Fatal(err)
	}
	if got := f.creates() - before; got != 0 {
		t.Fatalf("created %d sandboxes from a list that predates our own create", got)
	}
}

// staleOne drops one member from every Sandbox List: the cache has not
// shown our latest create yet.
type staleOne struct{ client.Client }

func (s staleOne) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if l, ok := list.(*sandboxv1beta1.SandboxList); ok && len(l.Items) > 0 {
		l.Items = l.Items[1:]
	}
	return nil
}

package warmpool

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
)

// recorded waits until the pool's event handler has recorded every uid
// (the informer calls it after updating the cache, so a test that waited
// for the cache may still be ahead of the handler).
func (f *fixture) recorded(pool string, uids ...types.UID) {
	f.t.Helper()
	exttest.Eventually(f.t, 10*time.Second, func() error {
		f.r.members.mu.Lock()
		defer f.r.members.mu.Unlock()
		p := f.r.members.pools[f.key(pool)]
		for _, uid := range uids {
			if p == nil || p.dirty[uid] == (types.NamespacedName{}) {
				return fmt.Errorf("change of %s not recorded yet", uid)
			}
		}
		return nil
	})
}

// totals returns the pool's running totals (active, ready, terminating).
func (f *fixture) totals(pool string) (int, int, int, bool) {
	f.r.members.mu.Lock()
	defer f.r.members.mu.Unlock()
	p := f.r.members.pools[f.key(pool)]
	if p == nil || !p.synced {
		return 0, 0, 0, false
	}
	return p.t.active, p.t.ready, p.t.terminatingN, true
}

// adopt takes members over as a claim does: the claim becomes their
// controller, in one patch per member, all before the pool runs again.
func (f *fixture) adopt(claim *extv1beta1.SandboxClaim, sbs []sandboxv1beta1.Sandbox) []types.UID {
	f.t.Helper()
	ref := metav1.OwnerReference{APIVersion: extv1beta1.GroupVersion.String(), Kind: "SandboxClaim",
		Name: claim.Name, UID: claim.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	var uids []types.UID
	for i := range sbs {
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": sbs[i].ResourceVersion, "ownerReferences": []metav1.OwnerReference{ref}}})
		if err != nil {
			f.t.Fatal(err)
		}
		if err := env.Client.Patch(context.Background(), &sbs[i], client.RawPatch(types.MergePatchType, data)); err != nil {
			f.t.Fatal(err)
		}
		uids = append(uids, sbs[i].UID)
	}
	for i := range sbs {
		f.cached(&sbs[i])
	}
	return uids
}

// An adoption burst is accounted for incrementally, without listing the
// pool: the pass replaces exactly the adopted members and writes the
// status a full recount gives; a full pass (after fullResyncInterval)
// agrees with the running totals, and a forged edit in the middle of the
// incremental passes still reaches the full pass that deletes it.
func TestAdoptionBurstAccountedIncrementally(t *testing.T) {
	f := newFixture(t, Options{})
	const replicas, burst = 20, 8
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", replicas))
	f.converge("p")
	ms := f.members("p")
	if len(ms) != replicas {
		t.Fatalf("%d members, want %d", len(ms), replicas)
	}
	for i := range ms {
		f.markReady(&ms[i])
	}
	f.settle("p")
	f.reconcile("p")
	if st := f.pool("p").Status; st.Replicas != replicas || st.ReadyReplicas != replicas {
		t.Fatalf("before the burst: status %+v", st)
	}

	claim := exttest.NewClaim(f.ns, "c", "p")
	f.create(claim)
	uids := f.adopt(claim, ms[:burst])
	f.recorded("p", uids...)

	full, inc := f.r.fullPasses.Load(), f.r.incrementalPasses.Load()
	before := f.creates()
	f.reconcile("p")
	if got := f.r.fullPasses.Load() - full; got != 0 {
		t.Fatalf("the adoption burst took %d full passes, want an incremental one", got)
	}
	if got := f.r.incrementalPasses.Load() - inc; got != 1 {
		t.Fatalf("%d incremental passes, want 1", got)
	}
	if got := f.creates() - before; got != burst {
		t.Fatalf("replaced %d adopted members, want exactly %d", got, burst)
	}
	if st := f.pool("p").Status; st.Replicas != replicas || st.ReadyReplicas != replicas-burst {
		t.Fatalf("after the burst: status %+v, want %d replicas, %d ready", st, replicas, replicas-burst)
	}
	f.settle("p")
	// The replacements' create events are accounted for in the next pass:
	// nothing more is created.
	before = f.creates()
	f.reconcile("p")
	if got := f.creates() - before; got != 0 {
		t.Fatalf("a second pass created %d more", got)
	}
	active, ready, term, ok := f.totals("p")
	if !ok || active != replicas || ready != replicas-burst || term != 0 {
		t.Fatalf("running totals %d active, %d ready, %d terminating (synced %v)", active, ready, term, ok)
	}

	// A tenant edits a member's spec while passes are incremental: the
	// change escalates to a full pass, which deletes and replaces it.
	var victim sandboxv1beta1.Sandbox
	for _, sb := range f.members("p") {
		if ownedByPool(&sb, f.pool("p")) {
			victim = sb
		}
	}
	f.edit(&victim, func() { victim.Spec.PodTemplate.Spec.Containers[0].Image = "evil:latest" })
	f.recorded("p", victim.UID)
	full = f.r.fullPasses.Load()
	f.reconcile("p")
	if f.r.fullPasses.Load() == full {
		t.Fatal("a forged member was accounted for incrementally")
	}
	var got sandboxv1beta1.Sandbox
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(&victim), &got)
	if err == nil && got.DeletionTimestamp == nil {
		t.Fatal("the edited member was not deleted")
	}
	if len(f.rec.byReason(ReasonForgedMember)) == 0 {
		t.Fatal("no ForgedMember event")
	}
	f.converge("p")

	// Past the resync interval a full pass recounts; it must agree with
	// the totals the incremental passes kept.
	f.reconcile("p")
	active, ready, term, _ = f.totals("p")
	f.now = time.Now().Add(fullResyncInterval + time.Second)
	full = f.r.fullPasses.Load()
	before = f.creates()
	f.reconcile("p")
	if f.r.fullPasses.Load() != full+1 {
		t.Fatal("no full pass after the resync interval")
	}
	if got := f.creates() - before; got != 0 {
		t.Fatalf("the full recount created %d", got)
	}
	a2, r2, t2, ok := f.totals("p")
	if !ok || a2 != active || r2 != ready || t2 != term {
		t.Fatalf("full recount %d/%d/%d differs from the running totals %d/%d/%d", a2, r2, t2, active, ready, term)
	}
	if st := f.pool("p").Status; int(st.Replicas) != a2 || int(st.ReadyReplicas) != r2 {
		t.Fatalf("status %+v, recount %d active %d ready", st, a2, r2)
	}
}

// A pool member deleted behind the pool's back (not by the pool) is
// accounted for by its delete event and replaced once.
func TestForeignDeleteAccountedIncrementally(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 5))
	f.converge("p")
	f.reconcile("p")
	ms := f.members("p")
	for i := range ms[:2] {
		if err := env.Client.Delete(context.Background(), &ms[i]); err != nil {
			t.Fatal(err)
		}
	}
	f.recorded("p", ms[0].UID, ms[1].UID)
	exttest.Eventually(t, 10*time.Second, func() error {
		cached, err := exttest.PoolMembers(f.c, f.ns, "p")
		if err != nil || len(cached) != 3 {
			return fmt.Errorf("cache shows %d members (%v)", len(cached), err)
		}
		return nil
	})
	inc, before := f.r.incrementalPasses.Load(), f.creates()
	f.reconcile("p")
	if f.r.incrementalPasses.Load() != inc+1 {
		t.Fatal("the deletions were not accounted for incrementally")
	}
	if got := f.creates() - before; got != 2 {
		t.Fatalf("replaced %d deleted members, want 2", got)
	}
	if st := f.pool("p").Status; st.Replicas != 5 {
		t.Fatalf("status %+v", st)
	}
}

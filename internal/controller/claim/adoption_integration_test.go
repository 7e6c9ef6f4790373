package claim

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var sandboxGR = schema.GroupResource{Group: "agents.x-k8s.io", Resource: "sandboxes"}

func TestOldestReadyAdoptedAndStatusInSamePass(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("old-unready", tmpl, pool, false, "10.0.0.1", nil)
	f.member("ready-a", tmpl, pool, true, "10.0.0.2", nil)
	f.member("ready-b", tmpl, pool, true, "10.0.0.3", nil)
	claim := f.claim("c1")
	res := f.mustReconcile("c1")
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %s after a warm adoption", res.RequeueAfter)
	}
	got := f.getClaim("c1")
	if got.Status.SandboxStatus.Name != "ready-a" || got.Status.SandboxStatus.PodIPs[0] != "10.0.0.2" || readyReason(got) != "DependenciesReady" {
		t.Fatalf("claim status after one pass: %+v", got.Status)
	}
	var sb sandboxv1beta1.Sandbox
	_ = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "ready-a"}, &sb)
	if index.ControllerClaimUID(&sb) != string(claim.UID) {
		t.Fatal("adopted sandbox not controlled by the claim")
	}
	// Two writes in the pass: the adoption patch and the claim status.
	if n := len(f.writes.Writes()); n != 2 {
		t.Fatalf("%d writes: %v", n, f.writes.Writes())
	}
	// A second pass (cache possibly behind) adopts nothing more.
	f.mustReconcile("c1")
	f.mustReconcile("c1")
	if n := f.writes.Count("patch", "sandboxes"); n != 1 {
		t.Fatalf("%d adoption patches over three passes, want 1", n)
	}
}

func TestFirstNetworkedUnreadyAdoptedWhenNoneReady(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("unready", tmpl, pool, false, "10.0.0.1", nil)
	f.claim("c1")
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "unready" {
		t.Fatalf("bound %q", got)
	}
	if r := readyReason(f.getClaim("c1")); r != extv1beta1.ClaimReasonSandboxNotReady {
		t.Errorf("reason %q", r)
	}
}

func TestPendingNetworkWaitsWithinBoundThenGoesCold(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.vouch(pool, tmpl, f.member("noip", tmpl, pool, false, "", nil))
	f.claim("c1")
	res := f.mustReconcile("c1")
	if res.RequeueAfter <= 0 || res.RequeueAfter > warmWaitPoll {
		t.Fatalf("RequeueAfter = %s, want a short wait for the candidate's IP", res.RequeueAfter)
	}
	if len(f.writes.Writes()) != 0 {
		t.Fatalf("wrote while waiting: %v", f.writes.Writes())
	}
	f.now = time.Now().Add(DefaultWarmWait + time.Second)
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "c1" {
		t.Fatalf("after the grace the claim got %q, want a cold sandbox", got)
	}
}

func TestCandidateNetworkedDuringGraceIsAdopted(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	sb := f.member("noip", tmpl, pool, false, "", nil)
	f.vouch(pool, tmpl, sb)
	f.claim("c1")
	if res := f.mustReconcile("c1"); res.RequeueAfter == 0 {
		t.Fatal("did not wait")
	}
	sb.Status.PodIPs = []string{"10.0.0.7"}
	if err := env.Client.Status().Update(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	f.cachedObj(sb)
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "noip" {
		t.Fatalf("bound %q", got)
	}
}

func TestEmptyPoolGoesColdImmediately(t *testing.T) {
	f := newFixture(t, Options{})
	f.setup("")
	f.claim("c1")
	if res := f.mustReconcile("c1"); res.RequeueAfter != 0 {
		t.Fatalf("waited %s on an empty pool", res.RequeueAfter)
	}
	if got := f.bound("c1"); got != "c1" {
		t.Fatalf("bound %q", got)
	}
}

func TestRecreatePoolRefusesStaleCandidates(t *testing.T) {
	stale := func(sb *sandboxv1beta1.Sandbox) {
		sb.Labels[labels.SandboxTemplateHash] = "0ld0ld00"
		sb.Spec.PodTemplate.Spec.Containers[0].Image = "old:1"
	}
	t.Run("Recreate: stale skipped, cold", func(t *testing.T) {
		f := newFixture(t, Options{})
		tmpl, pool := f.setup(extv1beta1.RecreateUpdateStrategyType)
		f.member("stale", tmpl, pool, true, "10.0.0.1", stale)
		f.claim("c1")
		f.mustReconcile("c1")
		if got := f.bound("c1"); got != "c1" {
			t.Fatalf("Recreate pool handed out %q", got)
		}
	})
	t.Run("Recreate: current without hash label adopted", func(t *testing.T) {
		f := newFixture(t, Options{})
		tmpl, pool := f.setup(extv1beta1.RecreateUpdateStrategyType)
		f.member("nolabel", tmpl, pool, true, "10.0.0.1", func(sb *sandboxv1beta1.Sandbox) { delete(sb.Labels, labels.SandboxTemplateHash) })
		f.claim("c1")
		f.mustReconcile("c1")
		if got := f.bound("c1"); got != "nolabel" {
			t.Fatalf("bound %q", got)
		}
	})
	t.Run("OnReplenish adopts stale the pool vouched for", func(t *testing.T) {
		f := newFixture(t, Options{})
		tmpl, pool := f.setup(extv1beta1.OnReplenishUpdateStrategyType)
		sb := f.member("stale", tmpl, pool, true, "10.0.0.1", stale)
		// What the pool controller records when it creates a member from
		// the older template version.
		f.r.vetted.Record(pool.UID, sb.UID, "0ld0ld00")
		f.claim("c1")
		f.mustReconcile("c1")
		if got := f.bound("c1"); got != "stale" {
			t.Fatalf("bound %q", got)
		}
	})
	t.Run("OnReplenish refuses a stale-looking member nobody vouched for", func(t *testing.T) {
		// Indistinguishable by labels and owner reference (UID included)
		// from a member of an older template: its content is all a tenant
		// chose, so it is not handed out.
		f := newFixture(t, Options{})
		tmpl, pool := f.setup(extv1beta1.OnReplenishUpdateStrategyType)
		f.member("stale", tmpl, pool, true, "10.0.0.1", stale)
		f.claim("c1")
		f.mustReconcile("c1")
		if got := f.bound("c1"); got != "c1" {
			t.Fatalf("bound %q, want a cold sandbox", got)
		}
	})
}

// A conflict on the adoption patch re-reads the candidate: a concurrent
// status write leaves it adoptable, and the same candidate is taken.
func TestAdoptionConflictRetriesSameCandidate(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.member("b", tmpl, pool, true, "10.0.0.2", nil)
	f.claim("c1")
	conflicts := 0
	f.funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*sandboxv1beta1.Sandbox); ok && conflicts == 0 {
			conflicts++
			return apierrors.NewConflict(sandboxGR, obj.GetName(), errors.New("the object has been modified"))
		}
		return c.Patch(ctx, obj, p, opts...)
	}
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "a" {
		t.Fatalf("after a conflict the claim got %q, want the same candidate a", got)
	}
}

// A candidate claimed by someone else between our read and our patch is
// lost to us: the next candidate is taken in the same pass.
func TestCandidateTakenByAnotherClaimMovesOn(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.member("b", tmpl, pool, true, "10.0.0.2", nil)
	f.claim("c1")
	thief := f.claim("thief")
	stolen := false
	f.funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if sb, ok := obj.(*sandboxv1beta1.Sandbox); ok && !stolen {
			stolen = true
			// Another controller instance adopts it first.
			steal := []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","name":"thief","uid":"` +
				string(thief.UID) + `","controller":true}],"labels":{"agents.x-k8s.io/warm-pool-sandbox":null}}}`)
			if err := env.Client.Patch(ctx, sb.DeepCopy(), client.RawPatch("application/merge-patch+json", steal)); err != nil {
				t.Fatal(err)
			}
		}
		return c.Patch(ctx, obj, p, opts...)
	}
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "b" {
		t.Fatalf("claim got %q, want the next candidate b", got)
	}
}

// A status write that conflicts (the claim changed meanwhile) is dropped
// without error and without recording metrics; the binding survives in
// the Sandbox's owner reference and the next pass finalises it.
func TestStatusConflictDroppedAndRecovered(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.member("b", tmpl, pool, true, "10.0.0.2", nil)
	f.claim("c1")
	f.funcs.SubResourcePatch = func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
		return apierrors.NewConflict(schema.GroupResource{Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, obj.GetName(), errors.New("modified"))
	}
	res, err := f.reconcile("c1")
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("conflict not dropped silently: %v, %+v", err, res)
	}
	if st, _ := f.r.states.get(client.ObjectKey{Namespace: f.ns, Name: "c1"}, f.getClaim("c1").UID); st.readyRecorded {
		t.Fatal("metrics recorded for a non-authoritative pass")
	}
	f.funcs.SubResourcePatch = nil
	// Even with its memory of the claim gone (as after a restart), the
	// controller finds the adopted sandbox through its owner reference
	// instead of adopting a second one. A restarted controller lists
	// before it reconciles, so its cache holds the adoption patch: wait
	// for this cache to hold it too, as the restart would.
	adopted := &sandboxv1beta1.Sandbox{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "a"}, adopted); err != nil {
		t.Fatal(err)
	}
	if !controlledBy(adopted, f.getClaim("c1")) {
		t.Fatalf("the conflicting pass did not adopt a: owners %+v", adopted.OwnerReferences)
	}
	f.cachedObj(adopted)
	f.r.states.forget(client.ObjectKey{Namespace: f.ns, Name: "c1"}, "")
	f.r.queue.Push(PoolKey(f.ns, "pool"), Candidate{Name: "b", Ready: true, HasIPs: true})
	eventually(t, func() error {
		f.mustReconcile("c1")
		if got := f.bound("c1"); got != "a" {
			return errors.New("claim not bound to a yet: " + got)
		}
		return nil
	})
	if n := f.writes.Count("patch", "sandboxes"); n != 1 {
		t.Fatalf("%d adoption patches, want exactly 1 (no second sandbox)", n)
	}
}

func TestColdCreateAlreadyExistsIsPending(t *testing.T) {
	f := newFixture(t, Options{})
	f.setup("")
	f.claim("c1")
	f.funcs.Create = func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		return apierrors.NewAlreadyExists(sandboxGR, obj.GetName())
	}
	res := f.mustReconcile("c1")
	if res.RequeueAfter != createPendingRequeue {
		t.Fatalf("RequeueAfter = %s, want %s", res.RequeueAfter, createPendingRequeue)
	}
	if r := readyReason(f.getClaim("c1")); r != extv1beta1.ClaimReasonSandboxCreatePending {
		t.Fatalf("reason %q", r)
	}
}

// A transient error while looking up the bound sandbox keeps the binding
// in status (so a retry never falls back to a cold start).
func TestTransientLookupErrorKeepsBinding(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("a", tmpl, pool, true, "10.0.0.1", nil)
	f.claim("c1")
	f.mustReconcile("c1")
	f.cachedObj(f.getClaim("c1"))
	f.funcs.Get = func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*sandboxv1beta1.Sandbox); ok {
			return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
		}
		return c.Get(ctx, key, obj, opts...)
	}
	if _, err := f.reconcile("c1"); err == nil {
		t.Fatal("a transient error must be retried with backoff")
	}
	c := f.getClaim("c1")
	if c.Status.SandboxStatus.Name != "a" || readyReason(c) != extv1beta1.ClaimReasonReconcilerError {
		t.Fatalf("status after a transient error: %+v", c.Status)
	}
}

func TestGhostCandidateSkipped(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl, pool := f.setup("")
	f.member("real", tmpl, pool, true, "10.0.0.1", nil)
	// A key whose Sandbox is gone (its delete event not seen yet).
	f.r.queue.Push(PoolKey(f.ns, "pool"), Candidate{Name: "ghost", Ready: true, HasIPs: true, Created: time.Unix(1, 0)})
	f.claim("c1")
	f.mustReconcile("c1")
	if got := f.bound("c1"); got != "real" {
		t.Fatalf("bound %q", got)
	}
}

package warmpool

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func TestPoolSizing(t *testing.T) {
	f := newFixture(t, Options{})
	pool := exttest.NewPool(f.ns, "p", "tmpl", 0)
	pool.Spec.Replicas = nil // defaults to 1
	f.create(exttest.NewTemplate(f.ns, "tmpl"), pool)

	steps := []struct {
		name     string
		replicas *int32
		want     int
	}{
		{"unset replicas means 1", nil, 1},
		{"tops up", ptr.To[int32](4), 4},
		{"steady", ptr.To[int32](4), 4},
		{"deletes the excess", ptr.To[int32](2), 2},
		{"zero deletes all", ptr.To[int32](0), 0},
		{"refills from empty", ptr.To[int32](3), 3},
	}
	for _, s := range steps {
		p := f.pool("p")
		if !ptr.Equal(p.Spec.Replicas, s.replicas) && s.replicas != nil {
			f.edit(p, func() { p.Spec.Replicas = s.replicas })
		}
		before := f.creates()
		f.converge("p")
		if got := len(f.members("p")); got != s.want {
			t.Fatalf("%s: %d members, want %d", s.name, got, s.want)
		}
		if s.name == "steady" && f.creates() != before {
			t.Fatalf("steady pool created %d sandboxes", f.creates()-before)
		}
		st := f.pool("p").Status
		if int(st.Replicas) != s.want || st.ReadyReplicas != 0 {
			t.Fatalf("%s: status %+v", s.name, st)
		}
		if st.Selector != labels.WarmPoolSandbox+"="+labels.NameHash("p") || st.ObservedGeneration != f.pool("p").Generation {
			t.Fatalf("%s: status %+v", s.name, st)
		}
	}
}

func TestReadyReplicasAndZeroWrittenBack(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 3))
	f.converge("p")
	ms := f.members("p")
	f.markReady(&ms[0])
	f.markReady(&ms[1])
	f.settle("p")
	f.reconcile("p")
	if st := f.pool("p").Status; st.Replicas != 3 || st.ReadyReplicas != 2 {
		t.Fatalf("status %+v, want 3 replicas, 2 ready", st)
	}
	p := f.pool("p")
	f.edit(p, func() { p.Spec.Replicas = ptr.To[int32](0) })
	f.converge("p")
	f.reconcile("p")
	if st := f.pool("p").Status; st.Replicas != 0 || st.ReadyReplicas != 0 {
		t.Fatalf("zero counts not written back: %+v", st)
	}
}

// TestExcessDeletesUnreadyThenNewest: scaling down keeps the Ready members.
func TestExcessDeletesUnreadyFirst(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 3))
	f.converge("p")
	ms := f.members("p")
	f.markReady(&ms[1])
	f.settle("p")
	p := f.pool("p")
	f.edit(p, func() { p.Spec.Replicas = ptr.To[int32](1) })
	f.converge("p")
	left := f.members("p")
	if len(left) != 1 || left[0].Name != ms[1].Name {
		t.Fatalf("kept %v, want the Ready member %s", names(left), ms[1].Name)
	}
}

func TestMaxBatchSizeCapsCreates(t *testing.T) {
	f := newFixture(t, Options{MaxBatchSize: 2})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 5))
	f.reconcile("p")
	if got := f.creates(); got != 2 {
		t.Fatalf("first pass created %d, want the batch cap 2", got)
	}
	f.settle("p")
	f.converge("p")
	if got := len(f.members("p")); got != 5 {
		t.Fatalf("%d members, want 5", got)
	}
}

func TestTemplateMissingIsReportedNotFatal(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{})
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	f.create(tmpl, exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p")
	if err := env.Client.Delete(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	exttest.Eventually(t, 10e9, func() error {
		var got extv1beta1.SandboxTemplate
		return expectNotFound(f.c.Get(context.Background(), clientKey(f.ns, "tmpl"), &got))
	})
	// Replace a member: with the template gone nothing may be created, the
	// pass must not fail, and the condition is reported once.
	ms := f.members("p")
	if err := env.Client.Delete(context.Background(), &ms[0]); err != nil {
		t.Fatal(err)
	}
	f.settle("p")
	before := f.creates()
	f.reconcile("p")
	f.reconcile("p")
	if f.creates() != before {
		t.Fatal("created sandboxes without a template")
	}
	if n := len(f.rec.byReason(ReasonTemplateNotFound)); n != 1 {
		t.Fatalf("%d TemplateNotFound events, want 1", n)
	}
	if len(f.members("p")) != 1 {
		t.Fatal("the remaining member must be kept")
	}
	// The template comes back: the pool refills.
	f.create(exttest.NewTemplate(f.ns, "tmpl"))
	exttest.Eventually(t, 10e9, func() error {
		var got extv1beta1.SandboxTemplate
		return f.c.Get(context.Background(), clientKey(f.ns, "tmpl"), &got)
	})
	f.converge("p")
	if len(f.members("p")) != 2 {
		t.Fatal("pool did not refill once the template returned")
	}
}

// With a status write interval, a burst of changes costs one write per
// interval; the last state is written once the interval has passed.
func TestStatusWritesCoalesced(t *testing.T) {
	f := newFixture(t, Options{StatusWriteInterval: time.Minute})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 2))
	base := time.Now()
	f.now = base
	f.converge("p")
	if n := f.writes.Count("patch", "sandboxwarmpools/status"); n != 1 {
		t.Fatalf("%d status writes while filling, want 1", n)
	}
	ms := f.members("p")
	f.markReady(&ms[0])
	res := f.reconcile("p")
	if n := f.writes.Count("patch", "sandboxwarmpools/status"); n != 1 {
		t.Fatal("status rewritten within the interval")
	}
	if res.RequeueAfter < time.Minute || res.RequeueAfter > 90*time.Second {
		t.Fatalf("RequeueAfter = %s, want the rest of the interval", res.RequeueAfter)
	}
	f.now = base.Add(61 * time.Second)
	f.reconcile("p")
	if st := f.pool("p").Status; st.ReadyReplicas != 1 || st.Replicas != 2 {
		t.Fatalf("deferred status not written: %+v", st)
	}
}

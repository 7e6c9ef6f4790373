package warmpool

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// podFor creates the Pod of a member, with the given PodScheduled state.
func podFor(f *fixture, sb *sandboxv1beta1.Sandbox, scheduled corev1.ConditionStatus, reason string) *corev1.Pod {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: sb.Name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: exttest.PauseImage}}},
	}
	exttest.Create(f.t, env.Client, pod)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: scheduled, Reason: reason}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		f.t.Fatal(err)
	}
	f.cached(pod)
	return pod
}

func TestStuckMembersReplacedAfterGrace(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p")
	old := f.members("p")

	// Within the grace period nothing happens, and the pass asks to be
	// woken when the earliest member's grace runs out.
	res := f.reconcile("p")
	age := time.Since(old[0].CreationTimestamp.Time)
	lo := DefaultReadinessGrace() - age - time.Second
	if res.RequeueAfter < lo || res.RequeueAfter > (DefaultReadinessGrace()+graceSlack)*3/2 {
		t.Fatalf("RequeueAfter = %s, want about the grace deadline (%s) plus slack and jitter", res.RequeueAfter, lo)
	}
	if n := f.writes.Count("delete", "sandboxes"); n != 0 {
		t.Fatalf("%d members deleted within the grace period", n)
	}

	// Past it: one member's pod is scheduled but never became Ready, the
	// other has no pod at all. Both are replaced.
	podFor(f, &old[0], corev1.ConditionTrue, "")
	f.now = time.Now().Add(DefaultReadinessGrace() + time.Minute)
	f.reconcile("p")
	if n := f.writes.Count("delete", "sandboxes"); n != 2 {
		t.Fatalf("%d stuck members deleted, want 2", n)
	}
	f.settle("p")
	f.now = time.Time{}
	f.converge("p")
	if ms := f.members("p"); len(ms) != 2 || ms[0].UID == old[0].UID || ms[1].UID == old[0].UID {
		t.Fatalf("members after GC: %v", names(ms))
	}
}

func TestUnschedulableMembersAreHeld(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{UnschedulableRecheckInterval: 90 * time.Second})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 1))
	f.converge("p")
	sb := f.members("p")[0]
	pod := podFor(f, &sb, corev1.ConditionFalse, corev1.PodReasonUnschedulable)

	f.now = time.Now().Add(DefaultReadinessGrace() + time.Minute)
	res := f.reconcile("p")
	if n := f.writes.Count("delete", "sandboxes"); n != 0 {
		t.Fatal("an unschedulable member was replaced; its replacement would be unschedulable too")
	}
	if res.RequeueAfter < 90*time.Second || res.RequeueAfter > 135*time.Second {
		t.Fatalf("RequeueAfter = %s, want the recheck interval (90s, jittered)", res.RequeueAfter)
	}
	f.reconcile("p")
	evs := f.rec.byReason(ReasonNotProgressing)
	if len(evs) != 1 || evs[0].typ != corev1.EventTypeWarning {
		t.Fatalf("NotProgressing events = %+v, want exactly one warning", evs)
	}
	want := "1/1 sandboxes are unschedulable past the 5m0s readiness grace period; holding them instead of replacing (replacements would be equally unschedulable)"
	if evs[0].note != want {
		t.Errorf("event note %q", evs[0].note)
	}

	// The scheduler places it after all (but it stays not Ready): it is
	// now an ordinary stuck member, replaced, and the pool reports
	// progress.
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	f.cached(pod)
	f.reconcile("p")
	if n := f.writes.Count("delete", "sandboxes"); n != 1 {
		t.Fatalf("%d deletes, want the now-scheduled stuck member replaced", n)
	}
	if evs := f.rec.byReason(ReasonProgressing); len(evs) != 1 {
		t.Fatalf("Progressing events = %+v", evs)
	}
}

func TestConfigurableGraceAndDefaults(t *testing.T) {
	var o Options
	o.defaults()
	if o.ReadinessGracePeriod != 5*time.Minute || o.UnschedulableRecheckInterval != time.Minute || o.MaxBatchSize != 300 || o.Workers != 1 {
		t.Fatalf("defaults = %+v", o)
	}
	f := newFixture(t, Options{ReadinessGracePeriod: 10 * time.Minute})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 1))
	f.converge("p")
	f.now = time.Now().Add(6 * time.Minute)
	f.reconcile("p")
	if n := f.writes.Count("delete", "sandboxes"); n != 0 {
		t.Fatal("member deleted within a 10m grace period")
	}
}

func TestSettledReadyPoolArmsNoTimer(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p")
	for _, sb := range f.members("p") {
		f.markReady(&sb)
	}
	if res := f.reconcile("p"); res.RequeueAfter != 0 {
		t.Fatalf("a settled Ready pool asked to be requeued after %s", res.RequeueAfter)
	}
}

// Terminating members count against the target: no replacement is created
// while the original still exists (here held by a finalizer).
func TestTerminatingMembersCountAgainstTarget(t *testing.T) {
	testenv.SkipShort(t)
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "tmpl"), exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p")
	sb := f.members("p")[0]
	f.edit(&sb, func() { sb.Finalizers = []string{"test.agents.x-k8s.io/hold"} })
	if err := env.Client.Delete(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	_ = env.Client.Get(context.Background(), clientKey(f.ns, sb.Name), &sb)
	f.cached(&sb)
	before := f.creates()
	f.reconcile("p")
	f.reconcile("p")
	if f.creates() != before {
		t.Fatal("replacement created while the original is still terminating")
	}
	if st := f.pool("p").Status; st.Replicas != 1 {
		t.Fatalf("status.replicas = %d, want 1 (terminating members are not replicas)", st.Replicas)
	}
	_ = env.Client.Get(context.Background(), clientKey(f.ns, sb.Name), &sb)
	sb.Finalizers = nil
	if err := env.Client.Update(context.Background(), &sb); err != nil {
		t.Fatal(err)
	}
	f.settle("p")
	f.converge("p")
	if f.creates() != before+1 {
		t.Fatalf("%d creates after the member went, want 1", f.creates()-before)
	}
}

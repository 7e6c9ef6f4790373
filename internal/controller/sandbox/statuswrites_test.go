package sandbox

import (
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// startingPod is the owned Pod of a starting Sandbox at one of the three
// stages a fill goes through: created, scheduled, Running and Ready.
func startingPod(stage int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "s"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if stage >= 1 {
		p.Spec.NodeName = "kwok-node-7"
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	}
	if stage >= 2 {
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "10.0.0.7"
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.7"}}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	}
	return p
}

// passStatus is the status a pass computes from the persisted status and
// the Pod, with the controller's own condition code.
func passStatus(persisted *sandboxv1beta1.SandboxStatus, pod *corev1.Pod) *sandboxv1beta1.SandboxStatus {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "s", Generation: 1}}
	sb.Status = *persisted.DeepCopy()
	pr := podResult{pod: pod, owned: true}
	setPodStatusFields(sb, pr)
	applyConditions(sb, computeConditions(conditionInput{pod: pod, podOwned: true, problem: findPodProblem(pod)}))
	return &sb.Status
}

type statusWrite struct {
	at     time.Duration
	status *sandboxv1beta1.SandboxStatus
}

// simulateStart runs the write policy over a Sandbox whose Pod is created
// at 0, scheduled at scheduled and Ready at ready (never when 0): a pass
// runs on each Pod change and at each requeue the policy asks for, as the
// work queue would. It returns the status writes.
func simulateStart(t *testing.T, window, scheduled, ready time.Duration) []statusWrite {
	t.Helper()
	t0 := time.Unix(1000, 0)
	now := t0
	r := &Reconciler{Options: Options{StatusCoalesceWindow: window}, clock: newWriteClock(), Now: func() time.Time { return now }}
	key := types.NamespacedName{Namespace: "n", Name: "s"}
	stageAt := func(d time.Duration) int {
		switch {
		case ready > 0 && d >= ready:
			return 2
		case d >= scheduled:
			return 1
		}
		return 0
	}
	passes := []time.Duration{0, scheduled}
	if ready > 0 {
		passes = append(passes, ready)
	}
	persisted := &sandboxv1beta1.SandboxStatus{}
	var writes []statusWrite
	for i := 0; len(passes) > 0; i++ {
		if i > 100 {
			t.Fatalf("the policy never settles: passes %v", passes)
		}
		sort.Slice(passes, func(a, b int) bool { return passes[a] < passes[b] })
		at := passes[0]
		passes = passes[1:]
		now = t0.Add(at)
		cur := passStatus(persisted, startingPod(stageAt(at)))
		write, wait := r.statusDue(key, persisted, cur)
		switch {
		case write:
			writes = append(writes, statusWrite{at: at, status: cur})
			persisted = cur
			r.clock.forget(key) // as writeStatus does after the patch
		case wait > 0:
			passes = append(passes, at+wait)
		}
	}
	return writes
}

func podScheduledTrue(s *sandboxv1beta1.SandboxStatus) bool {
	return meta.IsStatusConditionTrue(s.Conditions, sandboxv1beta1.SandboxConditionPodScheduled)
}

// A Sandbox that becomes Ready costs at most 2 status writes even when the
// scheduler and the kubelet each take longer than the coalesce window (a
// loaded cluster): the first not-ready status, then Ready. The scheduling
// in between rides along with the Ready write instead of being a write of
// its own (the kwok fill at 1000 Sandboxes made 354 such writes, 2282
// status writes for 1000 Sandboxes), but only for a bounded time.
func TestStartingSandboxStatusWrites(t *testing.T) {
	const w = time.Second
	for _, tc := range []struct {
		name               string
		scheduled, ready   time.Duration
		want               int
		scheduledWrittenBy time.Duration // the placement is in status by then
	}{
		{name: "ready inside the window", scheduled: 300 * time.Millisecond, ready: 600 * time.Millisecond, want: 1},
		{name: "scheduled inside the window, ready after", scheduled: 300 * time.Millisecond, ready: 3 * time.Second, want: 2},
		{name: "scheduled and ready each after a window", scheduled: 1500 * time.Millisecond, ready: 3 * time.Second, want: 2},
		{name: "slow scheduler, slow kubelet", scheduled: 2 * time.Second, ready: 5 * time.Second, want: 2},
		// A Pod that stays Pending (a slow image pull) after it was placed:
		// the placement is written within scheduledRideAlong windows.
		{name: "scheduled, never ready", scheduled: 1500 * time.Millisecond, want: 2, scheduledWrittenBy: 1500*time.Millisecond + scheduledRideAlong*w},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writes := simulateStart(t, w, tc.scheduled, tc.ready)
			var at []time.Duration
			for _, wr := range writes {
				at = append(at, wr.at)
			}
			if len(writes) != tc.want {
				t.Errorf("%d status writes (at %v), want %d", len(writes), at, tc.want)
			}
			last := writes[len(writes)-1].status
			if tc.ready > 0 && !isReady(last) {
				t.Errorf("last write is not Ready: %+v", last.Conditions)
			}
			if !podScheduledTrue(last) || last.NodeName != "kwok-node-7" {
				t.Errorf("the placement never reached status: %+v, node %q", last.Conditions, last.NodeName)
			}
			if tc.scheduledWrittenBy > 0 {
				for _, wr := range writes {
					if podScheduledTrue(wr.status) && wr.at > tc.scheduledWrittenBy {
						t.Errorf("placement written at %v, want by %v", wr.at, tc.scheduledWrittenBy)
					}
				}
			}
		})
	}
}

func TestSchedulingOnlyChange(t *testing.T) {
	created := passStatus(&sandboxv1beta1.SandboxStatus{}, startingPod(0))
	scheduled := passStatus(created, startingPod(1))
	if !schedulingOnlyChange(created, scheduled) {
		t.Errorf("Pod placed: want a scheduling-only change\nold %+v\nnew %+v", created, scheduled)
	}
	if schedulingOnlyChange(&sandboxv1beta1.SandboxStatus{}, scheduled) {
		t.Errorf("a first status is not a scheduling-only change")
	}
	if schedulingOnlyChange(scheduled, passStatus(scheduled, startingPod(2))) {
		t.Errorf("Ready is not a scheduling-only change")
	}
	unschedulable := startingPod(0)
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available"}}
	if schedulingOnlyChange(created, passStatus(created, unschedulable)) {
		t.Errorf("an unschedulable Pod is not a scheduling-only change")
	}
}

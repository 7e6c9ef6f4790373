package warmpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// The running totals follow every transition a member can make, and a
// member counted twice is counted once.
func TestTallyTransitions(t *testing.T) {
	at := time.Unix(1000, 0)
	steps := []struct {
		uid                         types.UID
		c                           memberClass
		active, ready, terminatingN int
		due                         int
	}{
		{"a", activeUnready, 1, 0, 0, 1}, // created
		{"a", activeUnready, 1, 0, 0, 1}, // a status change that is not Ready: no double count
		{"b", activeUnready, 2, 0, 0, 2},
		{"a", activeReady, 2, 1, 0, 1}, // turned Ready: no longer due
		{"a", activeReady, 2, 1, 0, 1},
		{"a", notMember, 1, 0, 0, 1},   // adopted by a claim
		{"b", terminating, 0, 0, 1, 0}, // deleted by the pool
		{"b", notMember, 0, 0, 0, 0},   // its delete event
		{"c", notMember, 0, 0, 0, 0},   // never a member: nothing
		{"d", activeReady, 1, 1, 0, 0},
		{"d", terminating, 0, 0, 1, 0},
	}
	tl := newTally()
	for i, s := range steps {
		tl.set(s.uid, s.c, at)
		if tl.active != s.active || tl.ready != s.ready || tl.terminatingN != s.terminatingN || len(tl.due) != s.due {
			t.Fatalf("step %d (%s -> %d): active %d ready %d terminating %d due %d; want %d %d %d %d",
				i, s.uid, s.c, tl.active, tl.ready, tl.terminatingN, len(tl.due), s.active, s.ready, s.terminatingN, s.due)
		}
	}
	if len(tl.members) != 1 {
		t.Fatalf("members map holds %d entries, want 1 (left members must be dropped)", len(tl.members))
	}
}

func TestTallyNextDue(t *testing.T) {
	tl := newTally()
	if !tl.nextDue().IsZero() {
		t.Fatal("empty tally has a due time")
	}
	t0 := time.Unix(1000, 0)
	tl.set("late", activeUnready, t0.Add(time.Minute))
	tl.set("early", activeUnready, t0)
	tl.set("ready", activeReady, t0.Add(-time.Hour)) // ignored: Ready members are never due
	if got := tl.nextDue(); !got.Equal(t0) {
		t.Fatalf("nextDue = %v, want %v", got, t0)
	}
	tl.set("early", activeReady, time.Time{})
	if got := tl.nextDue(); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after the early member turned Ready, nextDue = %v", got)
	}
}

// An incremental pass is allowed only while nothing but member changes
// happened since the last full pass.
func TestIncrementalOK(t *testing.T) {
	now := time.Unix(10000, 0)
	pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pool-1", Generation: 3}}
	tmpl := testTemplate()
	tmpl.UID, tmpl.ResourceVersion = "tmpl-1", "7"
	ti := newTemplateInfo(tmpl)
	base := func() snapshot {
		return snapshot{dirty: map[types.UID]types.NamespacedName{}, track: poolTrack{
			synced: true, poolUID: "pool-1", generation: 3, tmplUID: "tmpl-1", tmplRV: "7",
			fullAt: now.Add(-time.Second), t: newTally(),
		}}
	}
	otherTmpl := tmpl.DeepCopy()
	otherTmpl.ResourceVersion = "8"
	cases := []struct {
		name string
		edit func(*snapshot)
		ti   *templateInfo
		want bool
	}{
		{"synced, nothing else changed", func(*snapshot) {}, ti, true},
		{"never synced", func(s *snapshot) { s.track.synced = false }, ti, false},
		{"an event asked for a full pass", func(s *snapshot) { s.full = true }, ti, false},
		{"pool recreated (UID)", func(s *snapshot) { s.track.poolUID = "pool-0" }, ti, false},
		{"pool spec changed (generation)", func(s *snapshot) { s.track.generation = 2 }, ti, false},
		{"template missing", func(*snapshot) {}, nil, false},
		{"template changed", func(*snapshot) {}, newTemplateInfo(otherTmpl), false},
		{"resync interval passed", func(s *snapshot) { s.track.fullAt = now.Add(-fullResyncInterval) }, ti, false},
		{"a member's grace runs out", func(s *snapshot) { s.track.t.set("young", activeUnready, now) }, ti, false},
		{"a member's grace is still running", func(s *snapshot) { s.track.t.set("young", activeUnready, now.Add(time.Second)) }, ti, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := base()
			c.edit(&s)
			if got := s.incrementalOK(pool, c.ti, now); got != c.want {
				t.Fatalf("incrementalOK = %v, want %v", got, c.want)
			}
		})
	}
}

// quickClass agrees with the full pass's classification, and hands every
// case that needs a corrective action back to the full pass.
func TestQuickClass(t *testing.T) {
	now := time.Now()
	pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "pool-uid"}}
	ti := newTemplateInfo(testTemplate())
	r := NewReconciler(nil, nil, Options{})
	key := "ns/pool"
	member := func(uid types.UID, edit func(*sandboxv1beta1.Sandbox)) *sandboxv1beta1.Sandbox {
		sb := buildSandbox(pool, ti, false, "")
		sb.Name, sb.UID, sb.Generation = string(uid), uid, 1
		sb.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
		if edit != nil {
			edit(sb)
		}
		return sb
	}
	ready := func(sb *sandboxv1beta1.Sandbox) {
		sb.Status.Conditions = []metav1.Condition{{Type: sandboxv1beta1.SandboxConditionReady, Status: metav1.ConditionTrue}}
	}
	claimRef := metav1.OwnerReference{APIVersion: extv1beta1.GroupVersion.String(), Kind: "SandboxClaim", Name: "c", UID: "claim-uid", Controller: ptr.To(true)}
	r.exp.ExpectDeletion(key, "doomed")
	cases := []struct {
		name   string
		sb     *sandboxv1beta1.Sandbox
		want   memberClass
		wantOK bool
	}{
		{"gone from the cache", nil, notMember, true},
		{"young, not Ready", member("young", nil), activeUnready, true},
		{"Ready", member("ready", ready), activeReady, true},
		{"adopted by a claim", member("claimed", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences = []metav1.OwnerReference{claimRef} }), notMember, true},
		{"pool label removed", member("unlabelled", func(sb *sandboxv1beta1.Sandbox) { delete(sb.Labels, labels.WarmPoolSandbox) }), notMember, true},
		{"terminating", member("terminating", func(sb *sandboxv1beta1.Sandbox) { sb.DeletionTimestamp = ptr.To(metav1.NewTime(now)) }), terminating, true},
		{"deleted by us, not yet observed", member("doomed", nil), terminating, true},
		{"forged owner reference (another pool UID)", member("forged-ref", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences[0].UID = "other" }), notMember, true},
		{"orphan: adopt or delete", member("orphan", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences = nil }), notMember, false},
		{"spec edited (generation 2): forged", member("edited", func(sb *sandboxv1beta1.Sandbox) { sb.Generation = 2 }), notMember, false},
		{"spec differs from the rendering: forged", member("tampered", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.PodTemplate.Spec.Containers[0].Image = "evil"
		}), notMember, false},
		{"warm label missing", member("cold", func(sb *sandboxv1beta1.Sandbox) { sb.Labels[labels.LaunchType] = "cold" }), notMember, false},
		{"unready past the grace: stuck", member("stuck", func(sb *sandboxv1beta1.Sandbox) {
			sb.CreationTimestamp = metav1.NewTime(now.Add(-r.opts.ReadinessGracePeriod - time.Second))
		}), notMember, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, due, ok := r.quickClass(key, pool, ti, c.sb, now)
			if got != c.want || ok != c.wantOK {
				t.Fatalf("quickClass = %d, ok %v; want %d, ok %v", got, ok, c.want, c.wantOK)
			}
			if got == activeUnready {
				if want := c.sb.CreationTimestamp.Add(r.opts.ReadinessGracePeriod + graceSlack); !due.Equal(want) {
					t.Fatalf("due %v, want %v", due, want)
				}
			} else if !due.IsZero() {
				t.Fatalf("due %v for class %d", due, got)
			}
		})
	}
}

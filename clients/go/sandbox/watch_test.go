package sandbox

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func sbObj(name string, ready bool) *sandboxv1beta1.Sandbox {
	st := metav1.ConditionFalse
	if ready {
		st = metav1.ConditionTrue
	}
	return &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Status:     sandboxv1beta1.SandboxStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: st, Reason: "R"}}},
	}
}

func isReadySB(s *sandboxv1beta1.Sandbox) (bool, error) {
	return s.Status.Conditions[0].Status == metav1.ConditionTrue, nil
}

// The watch loop: a closed watch and an error event re-list; objects of
// other types are ignored; the wait ends on the first ready object.
func TestWatchUntilRelistsAndIgnoresForeignObjects(t *testing.T) {
	var lists, watches atomic.Int32
	fakes := []*watch.FakeWatcher{watch.NewFake(), watch.NewFake(), watch.NewFake()}
	get := func(context.Context) (*sandboxv1beta1.Sandbox, error) {
		lists.Add(1)
		return sbObj("s", false), nil
	}
	watchFrom := func(context.Context, string) (watch.Interface, error) {
		return fakes[watches.Add(1)-1], nil
	}
	go func() {
		fakes[0].Stop() // closed by the server
		fakes[1].Error(&metav1.Status{Status: "Failure", Reason: metav1.StatusReasonExpired})
		fakes[2].Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s"}}) // not a Sandbox
		fakes[2].Modify(sbObj("s", false))
		fakes[2].Modify(sbObj("s", true))
	}()
	got, err := watchUntil(testCtx(t), "test", get, watchFrom, isReadySB, nil)
	if err != nil || got.Name != "s" {
		t.Fatalf("watchUntil = %v, %v", got, err)
	}
	if lists.Load() != 3 || watches.Load() != 3 {
		t.Errorf("%d lists, %d watches; want 3 each", lists.Load(), watches.Load())
	}
}

func TestWatchUntilDeletedAndTimeout(t *testing.T) {
	fw := watch.NewFake()
	get := func(context.Context) (*sandboxv1beta1.Sandbox, error) { return sbObj("s", false), nil }
	go fw.Delete(sbObj("s", false))
	_, err := watchUntil(testCtx(t), "test", get, func(context.Context, string) (watch.Interface, error) { return fw, nil }, isReadySB, nil)
	if !errors.Is(err, ErrSandboxDeleted) {
		t.Errorf("deleted: %v", err)
	}

	gone := func(context.Context) (*sandboxv1beta1.Sandbox, error) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "sandboxes"}, "s")
	}
	if _, err := watchUntil(testCtx(t), "test", gone, nil, isReadySB, nil); !errors.Is(err, ErrSandboxDeleted) {
		t.Errorf("missing: %v", err)
	}

	ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	_, err = watchUntil(ctx, "waiting for s", get,
		func(context.Context, string) (watch.Interface, error) { return watch.NewFake(), nil }, isReadySB,
		func(s *sandboxv1beta1.Sandbox) string {
			return "last conditions: " + conditionsString(s.Status.Conditions)
		})
	if !errors.Is(err, ErrTimeout) || err.Error() != "sandbox: waiting for s: operation timed out (last conditions: Ready=False (R: ))" {
		t.Errorf("timeout: %v", err)
	}
}

func TestRelistBackoff(t *testing.T) {
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := relistBackoff(i); got != w {
			t.Errorf("relistBackoff(%d) = %v, want %v", i, got, w)
		}
	}
}

package expectations

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newWithClock() (*Expectations, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	e := New(0)
	e.SetClock(c.now)
	return e, c
}

func TestCreateLifecycle(t *testing.T) {
	e, _ := newWithClock()
	if !e.Satisfied("p") {
		t.Fatal("fresh key must be satisfied")
	}
	if !e.TryExpectCreations("p", 3) {
		t.Fatal("first TryExpectCreations must succeed")
	}
	if e.TryExpectCreations("p", 1) {
		t.Fatal("second TryExpectCreations must be refused while creates are pending")
	}
	for i := 0; i < 2; i++ {
		e.CreationObserved("p")
		if e.Satisfied("p") {
			t.Fatalf("satisfied after %d of 3 observations", i+1)
		}
	}
	e.CreationObserved("p")
	if !e.Satisfied("p") {
		t.Fatal("not satisfied after all creations observed")
	}
	// Extra observations (objects the controller did not create) are harmless.
	e.CreationObserved("p")
	if c, d := e.Pending("p"); c != 0 || d != 0 {
		t.Fatalf("pending = %d,%d", c, d)
	}
}

func TestNonPositiveRejected(t *testing.T) {
	e, _ := newWithClock()
	for _, n := range []int{0, -1} {
		if e.TryExpectCreations("p", n) {
			t.Errorf("TryExpectCreations(%d) = true", n)
		}
	}
	if !e.Satisfied("p") {
		t.Error("rejected raise must not record anything")
	}
}

func TestLowerForFailedCreates(t *testing.T) {
	e, _ := newWithClock()
	e.TryExpectCreations("p", 5)
	e.CreationObserved("p")
	e.CreationObserved("p")
	e.LowerCreations("p", 3) // three creates failed
	if !e.Satisfied("p") {
		t.Fatal("failed creates must not keep the key blocked")
	}
	e.LowerCreations("p", 0)
	e.LowerCreations("missing", 2)
}

func TestDeleteLifecycle(t *testing.T) {
	e, _ := newWithClock()
	e.ExpectDeletion("p", "a")
	e.ExpectDeletion("p", "b")
	e.ExpectDeletion("p", "") // ignored
	if e.Satisfied("p") || !e.IsPendingDeletion("p", "a") {
		t.Fatal("deletion not recorded")
	}
	if e.TryExpectCreations("p", 1) {
		t.Fatal("creates must wait for deletes to be observed")
	}
	e.DeletionObserved("p", "a")
	if e.IsPendingDeletion("p", "a") || !e.IsPendingDeletion("p", "b") {
		t.Fatal("wrong uid cleared")
	}
	e.DeletionObserved("p", "b")
	e.DeletionObserved("p", "")
	if !e.Satisfied("p") {
		t.Fatal("not satisfied after deletes observed")
	}
}

func TestTimeout(t *testing.T) {
	e, c := newWithClock()
	e.TryExpectCreations("p", 2)
	c.t = c.t.Add(DefaultTimeout)
	if e.Satisfied("p") {
		t.Fatal("expired exactly at the timeout; must be strictly after")
	}
	c.t = c.t.Add(time.Second)
	if !e.Satisfied("p") {
		t.Fatal("not expired after the timeout")
	}
	// Deletions honour the timeout too.
	e.ExpectDeletion("p", "u")
	c.t = c.t.Add(DefaultTimeout + time.Second)
	if e.IsPendingDeletion("p", "u") {
		t.Fatal("pending deletion survived the timeout")
	}
}

func TestNewRaiseRefreshesTimeout(t *testing.T) {
	e, c := newWithClock()
	e.ExpectDeletion("p", "a")
	c.t = c.t.Add(4 * time.Minute)
	e.ExpectDeletion("p", "b") // refreshes raisedAt
	c.t = c.t.Add(2 * time.Minute)
	if e.Satisfied("p") {
		t.Fatal("a new raise must refresh the timeout")
	}
}

func TestForget(t *testing.T) {
	e, _ := newWithClock()
	e.TryExpectCreations("p", 2)
	e.ExpectDeletion("q", "x")
	e.Forget("p")
	if !e.Satisfied("p") || e.Satisfied("q") {
		t.Fatal("Forget must drop only its key")
	}
}

func TestConcurrentTryExpectHasOneWinner(t *testing.T) {
	e := New(0)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.TryExpectCreations("p", 1) {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d winners, want exactly 1", wins.Load())
	}
}

func TestConcurrentMixedOps(t *testing.T) {
	e := New(0)
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			uid := types.UID(string(rune('a' + i%26)))
			for j := 0; j < 100; j++ {
				e.TryExpectCreations("p", 2)
				e.CreationObserved("p")
				e.ExpectDeletion("p", uid)
				_ = e.IsPendingDeletion("p", uid)
				e.DeletionObserved("p", uid)
				e.LowerCreations("p", 1)
				_ = e.Satisfied("p")
			}
		}(i)
	}
	wg.Wait()
	for i := 0; i < 26; i++ {
		e.DeletionObserved("p", types.UID(string(rune('a'+i))))
	}
	e.LowerCreations("p", 1<<20)
	if !e.Satisfied("p") {
		t.Fatal("key still blocked after every write was observed")
	}
}

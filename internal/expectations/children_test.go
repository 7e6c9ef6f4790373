package expectations

import (
	"slices"
	"testing"
	"time"
)

func newChildrenWithClock() (*Children, *fakeClock) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	e := NewChildren(time.Minute)
	e.SetClock(c.now)
	return e, c
}

func TestChildrenCreateLifecycle(t *testing.T) {
	e, _ := newChildrenWithClock()
	if w := e.Wait("ns/sb", "u1"); w != 0 {
		t.Fatalf("fresh owner waits %v", w)
	}
	e.ExpectCreation("ns/sb", "u1", "Pod/sb")
	e.ExpectCreation("ns/sb", "u1", "Service/sb")
	if w := e.Wait("ns/sb", "u1"); w != time.Minute {
		t.Fatalf("Wait = %v, want the full timeout", w)
	}
	e.CreationObserved("ns/sb", "u1", "Pod/sb")
	if got := e.Pending("ns/sb", "u1"); !slices.Equal(got, []string{"Service/sb"}) {
		t.Fatalf("pending = %v", got)
	}
	// A delete observation does not clear a create.
	e.DeletionObserved("ns/sb", "u1", "Service/sb", "svc-uid")
	if e.Wait("ns/sb", "u1") == 0 {
		t.Fatal("a delete event satisfied a pending create")
	}
	e.CreationObserved("ns/sb", "u1", "Service/sb")
	if w := e.Wait("ns/sb", "u1"); w != 0 || e.Len() != 0 {
		t.Fatalf("Wait = %v, Len = %d after all creates were observed", w, e.Len())
	}
}

// The owner's UID, not its name, decides: events about the children of
// another Sandbox of the same name never satisfy this one, and a new
// Sandbox of the name never waits on its predecessor's writes.
func TestChildrenMatchOwnerUID(t *testing.T) {
	e, _ := newChildrenWithClock()
	e.ExpectCreation("ns/sb", "u1", "Pod/sb")
	e.CreationObserved("ns/sb", "forged", "Pod/sb")
	if e.Wait("ns/sb", "u1") == 0 {
		t.Fatal("an event from a child of another owner UID satisfied the expectation")
	}
	if w := e.Wait("ns/sb", "u2"); w != 0 {
		t.Fatalf("a recreated Sandbox (new UID) waits %v on its predecessor", w)
	}
	if e.Len() != 0 {
		t.Fatal("the predecessor's record must be dropped")
	}
}

func TestChildrenDeleteByUID(t *testing.T) {
	e, _ := newChildrenWithClock()
	e.ExpectDeletion("ns/sb", "u1", "Pod/sb", "pod-a")
	e.ExpectDeletion("ns/sb", "u1", "Pod/other", "") // ignored
	e.CreationObserved("ns/sb", "u1", "Pod/sb")
	e.DeletionObserved("ns/sb", "u1", "Pod/sb", "pod-b")
	if e.Wait("ns/sb", "u1") == 0 {
		t.Fatal("a create, or the delete of another UID, satisfied a pending delete")
	}
	e.DeletionObserved("ns/sb", "u1", "Pod/sb", "pod-a")
	if e.Wait("ns/sb", "u1") != 0 {
		t.Fatal("delete observed but still waiting")
	}
}

func TestChildrenCancelAndForget(t *testing.T) {
	e, _ := newChildrenWithClock()
	e.ExpectCreation("ns/sb", "u1", "Pod/sb")
	e.Cancel("ns/sb", "u2", "Pod/sb") // another owner: no effect
	if e.Wait("ns/sb", "u1") == 0 {
		t.Fatal("Cancel for another owner UID cleared the entry")
	}
	e.Cancel("ns/sb", "u1", "Pod/sb")
	if e.Wait("ns/sb", "u1") != 0 || e.Len() != 0 {
		t.Fatal("Cancel left the entry")
	}
	e.ExpectCreation("ns/sb", "u1", "Pod/sb")
	e.Forget("ns/sb")
	if e.Len() != 0 {
		t.Fatal("Forget left the record")
	}
}

func TestChildrenTimeout(t *testing.T) {
	e, c := newChildrenWithClock()
	e.ExpectCreation("ns/sb", "u1", "Pod/sb")
	c.t = c.t.Add(20 * time.Second)
	e.ExpectDeletion("ns/sb", "u1", "Service/sb", "svc")
	if w := e.Wait("ns/sb", "u1"); w != 40*time.Second {
		t.Fatalf("Wait = %v, want the time left of the oldest entry (40s)", w)
	}
	c.t = c.t.Add(41 * time.Second)
	if w := e.Wait("ns/sb", "u1"); w != 19*time.Second {
		t.Fatalf("Wait = %v after the oldest timed out, want 19s", w)
	}
	if got := e.Pending("ns/sb", "u1"); !slices.Equal(got, []string{"Service/sb"}) {
		t.Fatalf("pending = %v, want the timed-out create dropped", got)
	}
	c.t = c.t.Add(20 * time.Second)
	if w := e.Wait("ns/sb", "u1"); w != 0 || e.Len() != 0 {
		t.Fatalf("Wait = %v, Len = %d after every entry timed out", w, e.Len())
	}
}

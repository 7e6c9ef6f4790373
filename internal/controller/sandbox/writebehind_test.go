package sandbox

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestWriteBehindWindow(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	t0 := time.Unix(1000, 0)
	var off *writeBehind
	if off.wait(key, t0) != 0 || newWriteBehind(0).wait(key, t0) != 0 {
		t.Fatal("a zero window must never defer")
	}
	w := newWriteBehind(400 * time.Millisecond)
	if got := w.wait(key, t0); got != 400*time.Millisecond {
		t.Fatalf("first drift: wait %s", got)
	}
	// Redeliveries inside the window do not re-arm it.
	if got := w.wait(key, t0.Add(300*time.Millisecond)); got != 100*time.Millisecond {
		t.Fatalf("redelivery: wait %s, want 100ms", got)
	}
	if got := w.wait(key, t0.Add(400*time.Millisecond)); got != 0 {
		t.Fatalf("deadline: wait %s, want 0", got)
	}
	// Written: the next drift starts a new window.
	if got := w.wait(key, t0.Add(time.Second)); got != 400*time.Millisecond {
		t.Fatalf("new drift: wait %s", got)
	}
	w.clear(key)
	if got := w.wait(key, t0.Add(2*time.Second)); got != 400*time.Millisecond {
		t.Fatalf("after clear: wait %s", got)
	}
	if got := newWriteBehind(time.Hour).window; got != podMetadataFlushBound {
		t.Errorf("window %s not capped at %s", got, podMetadataFlushBound)
	}
}

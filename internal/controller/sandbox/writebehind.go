package sandbox

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// podMetadataFlushBound caps the write-behind window: the deferred patch
// strips the pool's safe-to-evict annotation from a claimed Pod, which must
// land well inside a cluster autoscaler's scan interval (10 s and more).
const podMetadataFlushBound = time.Second

// writeBehind defers the metadata patch of an already-owned Pod (label and
// annotation drift, such as the relabel after a claim adopts a warm
// Sandbox), so that under a burst of claims these recoverable writes leave
// the apiserver to the writes claims wait for. It keeps only when drift was
// first seen per Sandbox: a pass inside the window skips the patch and asks
// to come back when the window ends; redeliveries do not re-arm it; the
// pass after the deadline recomputes the drift from the cache and patches
// once. Losing this state (a restart, a failover) only restarts a window.
type writeBehind struct {
	window time.Duration
	mu     sync.Mutex
	since  map[types.NamespacedName]time.Time
}

func newWriteBehind(window time.Duration) *writeBehind {
	return &writeBehind{window: min(window, podMetadataFlushBound), since: map[types.NamespacedName]time.Time{}}
}

// wait returns how long the patch of key's drift may still wait; 0 means
// write it now (and forget the drift: the caller writes it).
func (w *writeBehind) wait(key types.NamespacedName, now time.Time) time.Duration {
	if w == nil || w.window <= 0 {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	first, ok := w.since[key]
	if !ok {
		w.since[key] = now
		return w.window
	}
	if left := first.Add(w.window).Sub(now); left > 0 {
		return left
	}
	delete(w.since, key)
	return 0
}

// clear forgets key: no drift is pending (or the Sandbox is gone).
func (w *writeBehind) clear(key types.NamespacedName) {
	if w == nil || w.window <= 0 {
		return
	}
	w.mu.Lock()
	delete(w.since, key)
	w.mu.Unlock()
}

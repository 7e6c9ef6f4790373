// Package refill is what the warm pool controller tells the claim
// controller of the same process about its pools' refills: whether it
// creates a pool's deficit now or, if not, why. A claim that finds no
// member adoptable counts the deficit of a pool that refills as members on
// their way (claim/waitline.go) instead of starting a pod of its own.
//
// Entries are keyed by the pool's UID and written only by this process's
// pool controller, so nothing a tenant writes (a pool of the same name, a
// copied label) can make claims wait; a pool the pool controller has not
// reconciled yet is unknown, and its deficit counts for nothing.
package refill

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Registry holds, per pool UID, why the pool does not refill ("" when it
// does).
type Registry struct {
	mu    sync.RWMutex
	pools map[types.UID]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{pools: map[types.UID]string{}} }

// Set records the outcome of a pool pass: blocked says why the pool's
// deficit will not be created soon, "" that it is being created.
func (r *Registry) Set(poolUID types.UID, blocked string) {
	r.mu.RLock()
	cur, ok := r.pools[poolUID]
	r.mu.RUnlock()
	if ok && cur == blocked {
		return // the common case: nothing changed since the last pass
	}
	r.mu.Lock()
	r.pools[poolUID] = blocked
	r.mu.Unlock()
}

// Refilling reports whether the pool controller creates the pool's
// deficit now; why says why not (empty for an unknown pool).
func (r *Registry) Refilling(poolUID types.UID) (ok bool, why string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	why, known := r.pools[poolUID]
	return known && why == "", why
}

// Forget drops a deleted pool.
func (r *Registry) Forget(poolUID types.UID) {
	r.mu.Lock()
	delete(r.pools, poolUID)
	r.mu.Unlock()
}

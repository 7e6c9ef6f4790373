// Package vetting decides whether a Sandbox that presents itself as a warm
// pool member really is one, for the pool (which deletes impostors) and for
// claims (which must never adopt one).
//
// Nothing a tenant can write proves membership: labels are copied, and an
// owner reference is not validated by the apiserver, so anyone allowed to
// create a Sandbox can name the pool, its kind, a served apiVersion and even
// its UID (pools are readable). What a tenant cannot forge is the content
// the controller would render and the server-maintained generation. So a
// pool-controlled Sandbox is a genuine member only if:
//
//   - its generation is 1: its spec was never edited after creation (an
//     edit and a revert leave generation 3, and the Pod may have been made
//     from the edited spec in between), and
//   - its spec is the rendering of the pool's template today (full semantic
//     comparison, never the sandbox-template-hash label), or this process
//     saw it match a rendering of the pool's template earlier at that same
//     generation (the Registry): that is how an OnReplenish pool keeps
//     members of an older template version without trusting their labels.
//
// The Registry is the memo that keeps the warm claim path O(1): a member the
// pool created or already compared is looked up, not compared again.
package vetting

import (
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// Verdict is what a pool-controlled Sandbox turns out to be.
type Verdict int

const (
	// Forged: edited after creation, or content that no rendering of the
	// pool's template this process knows of produced. Never adopted; the
	// pool deletes it.
	Forged Verdict = iota
	// Stale: a genuine member rendered from an older template version.
	Stale
	// Current: a genuine member matching the template today.
	Current
	// Unknown: genuine by the Registry but the template is unavailable, so
	// whether it is current cannot be told.
	Unknown
)

func (v Verdict) String() string {
	switch v {
	case Forged:
		return "forged or edited after creation"
	case Stale:
		return "stale"
	case Current:
		return "current"
	}
	return "unknown"
}

// Edited reports whether sb's spec changed after it was created. The
// apiserver bumps metadata.generation on every spec change of a resource
// with a status subresource; it starts at 1 (0 only in fakes).
func Edited(sb *sandboxv1beta1.Sandbox) bool { return sb.Generation > 1 }

// MatchesRendering reports whether sb's whole spec is what a pool renders
// from tmpl: the blueprint by semantic comparison (secure defaults applied,
// see blueprint.Matches, and the controller's late-binding key
// deliveryKey injected by exactly latebind.InjectKey's rule, "" for none),
// no expiry and the default operating mode. Pod template metadata is not
// compared: the pool adds its labels there and adoption rewrites it.
//
// The key is part of the content: a Sandbox that carries any other key (a
// tenant's, trusted by a sandboxd the tenant could then push env into)
// is not a rendering.
func MatchesRendering(tmpl *extv1beta1.SandboxTemplate, sb *sandboxv1beta1.Sandbox, deliveryKey string) bool {
	if sb.Spec.ShutdownTime != nil {
		return false
	}
	if m := sb.Spec.OperatingMode; m != "" && m != sandboxv1beta1.OperatingModeRunning {
		return false
	}
	return blueprint.Matches(withDeliveryKey(tmpl, deliveryKey), sb)
}

// withDeliveryKey is tmpl as the pool renders it with key injected (tmpl
// itself when nothing is injected; otherwise a copy, tmpl is shared).
func withDeliveryKey(tmpl *extv1beta1.SandboxTemplate, key string) *extv1beta1.SandboxTemplate {
	if !latebind.WouldInjectKey(tmpl.Spec.EnvVarsInjectionPolicy, &tmpl.Spec.PodTemplate.Spec, key) {
		return tmpl
	}
	t := tmpl.DeepCopy()
	latebind.InjectKey(t.Spec.EnvVarsInjectionPolicy, &t.Spec.PodTemplate.Spec, key)
	return t
}

// Judge classifies sb, which the caller has established is controlled by
// pool by UID. tmpl may be nil (unavailable); blueprintHash is
// blueprint.Hash(tmpl). A fresh match is recorded in reg, so the
// comparison runs once per member and template version.
func Judge(reg *Registry, pool *extv1beta1.SandboxWarmPool, tmpl *extv1beta1.SandboxTemplate, blueprintHash string, sb *sandboxv1beta1.Sandbox) Verdict {
	if Edited(sb) {
		return Forged
	}
	key := reg.DeliveryKey()
	vettedHash, vetted := reg.Lookup(pool.UID, sb.UID)
	switch {
	case tmpl == nil && vetted:
		return Unknown
	case tmpl == nil:
		return Forged
	case vetted && blueprintHash != "" && vettedHash == blueprintHash:
		return Current
	case vetted && blueprintHash != "" && reg.staleFor(pool.UID, sb.UID) == blueprintHash:
		return Stale
	case MatchesRendering(tmpl, sb, key):
		reg.Record(pool.UID, sb.UID, blueprintHash)
		return Current
	case vetted:
		reg.markStale(pool.UID, sb.UID, blueprintHash)
		return Stale
	case key != "" && MatchesRendering(tmpl, sb, ""):
		// Rendered before this controller injected its key (late binding
		// was off, or the template's policy changed since): genuine, but
		// not today's rendering. Vouched for under a hash that is never
		// current, so later passes find it Stale without comparing.
		reg.Record(pool.UID, sb.UID, keylessHash)
		reg.markStale(pool.UID, sb.UID, blueprintHash)
		return Stale
	}
	return Forged
}

// keylessHash marks a member vouched for as a rendering without the
// delivery key; no blueprint hash equals it.
const keylessHash = "keyless"

// retainGrace keeps a record this young even when the member is missing
// from a pass's listing: the pool's own create may not be in its cache yet.
const retainGrace = time.Minute

// Registry remembers, per pool UID, the members this process created or
// found to match a rendering of the pool's template, with the blueprint
// hash of that rendering. It is shared by the pool and claim controllers of
// one manager. It is memory only: after a restart, members are compared
// again, and members of an older template version cannot be vouched for any
// more (an OnReplenish pool then replaces them, see the package doc).
type Registry struct {
	mu    sync.RWMutex
	pools map[types.UID]map[types.UID]record
	now   func() time.Time
	// deliveryKey is the late-binding public key the pool injects into
	// the members it renders (latebind.InjectKey); "" for none. Set once,
	// before the controllers start: it is part of what "a rendering of
	// the pool's template" means for everyone sharing this Registry.
	deliveryKey string
}

// SetDeliveryKey sets the key members are rendered with. Call it before
// the controllers sharing r start.
func (r *Registry) SetDeliveryKey(key string) { r.deliveryKey = key }

// DeliveryKey is the key members are rendered with ("" for none, also for
// a nil Registry).
func (r *Registry) DeliveryKey() string {
	if r == nil {
		return ""
	}
	return r.deliveryKey
}

type record struct {
	hash string
	at   time.Time
	// staleFor memoises a failed comparison with a newer rendering.
	staleFor string
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{pools: map[types.UID]map[types.UID]record{}, now: time.Now}
}

// Record vouches for member sbUID of pool poolUID, rendered with hash.
func (r *Registry) Record(poolUID, sbUID types.UID, hash string) {
	if r == nil || poolUID == "" || sbUID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.pools[poolUID]
	if m == nil {
		m = map[types.UID]record{}
		r.pools[poolUID] = m
	}
	m[sbUID] = record{hash: hash, at: r.now()}
}

// Lookup returns the hash a member was vouched for with.
func (r *Registry) Lookup(poolUID, sbUID types.UID) (string, bool) {
	if r == nil {
		return "", false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	rec, ok := r.pools[poolUID][sbUID]
	return rec.hash, ok
}

func (r *Registry) staleFor(poolUID, sbUID types.UID) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.pools[poolUID][sbUID].staleFor
}

func (r *Registry) markStale(poolUID, sbUID types.UID, hash string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.pools[poolUID][sbUID]; ok {
		rec.staleFor = hash
		r.pools[poolUID][sbUID] = rec
	}
}

// Retain drops the records of pool's members for which keep is false
// (claimed, deleted), except records younger than retainGrace.
func (r *Registry) Retain(poolUID types.UID, keep func(types.UID) bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for uid, rec := range r.pools[poolUID] {
		if !keep(uid) && now.Sub(rec.at) > retainGrace {
			delete(r.pools[poolUID], uid)
		}
	}
}

// ForgetPool drops every record of a pool.
func (r *Registry) ForgetPool(poolUID types.UID) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.pools, poolUID)
	r.mu.Unlock()
}

// Len is the number of records of a pool, for tests.
func (r *Registry) Len(poolUID types.UID) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.pools[poolUID])
}

// Claimed Sandboxes. A claim finds its Sandbox by status (written only by
// the controller) or by this process's memory, and otherwise by an owner
// reference or by its name, neither of which a tenant is kept from writing:
// anyone allowed to create a Sandbox can name a claim (UIDs are readable) as
// its controller. Such a Sandbox is the claim's only if its content is what
// the controller renders for the claim (the caller renders it, warm or
// cold) and it was never edited: same reasoning as for pool members.

// IsRenderedAs reports whether sb is want's rendering, never edited after
// creation: generation 1 and SpecMatches.
func IsRenderedAs(want *sandboxv1beta1.SandboxSpec, sb *sandboxv1beta1.Sandbox) bool {
	return !Edited(sb) && SpecMatches(want, &sb.Spec)
}

// SpecMatches compares a Sandbox spec with the one the controller rendered,
// semantically (unset and empty collections are equal):
//
//   - the pod spec as a whole (the rendering already carries the secure
//     defaults, so an injected env var or a mounted token is a difference);
//   - the user-visible pod labels and annotations; system keys
//     (agents.x-k8s.io/...) are the controller's bookkeeping and the
//     Sandbox controller never copies them to the Pod;
//   - volume claim templates in full, the service toggle, no expiry and
//     the default operating mode (the apiserver defaults "" to Running).
//
// ShutdownPolicy is not compared: it is defaulted by the apiserver and has
// no effect without a shutdown time.
func SpecMatches(want, got *sandboxv1beta1.SandboxSpec) bool {
	if !equality.Semantic.DeepEqual(want.ShutdownTime, got.ShutdownTime) {
		return false
	}
	if m := got.OperatingMode; m != "" && m != sandboxv1beta1.OperatingModeRunning {
		return false
	}
	if !equality.Semantic.DeepEqual(want.PodTemplate.Spec, got.PodTemplate.Spec) {
		return false
	}
	wm, gm := want.PodTemplate.ObjectMeta, got.PodTemplate.ObjectMeta
	if !maps.Equal(labels.UserKeys(wm.Labels), labels.UserKeys(gm.Labels)) || !maps.Equal(labels.UserKeys(wm.Annotations), labels.UserKeys(gm.Annotations)) {
		return false
	}
	if !equality.Semantic.DeepEqual(want.VolumeClaimTemplates, got.VolumeClaimTemplates) {
		return false
	}
	return equality.Semantic.DeepEqual(want.Service, got.Service)
}

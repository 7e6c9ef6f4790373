package warmpool

import (
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/vetting"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// doomReason says why classify deletes a member; "" keeps it.
type doomReason string

const (
	keep doomReason = ""
	// stale: rendered from an older template (or another template) under
	// Recreate.
	stale doomReason = "stale"
	// forged: claims to be a member but its content is not one the pool
	// rendered (see package vetting); deleted under every strategy, since
	// a claim would otherwise hand it to a victim.
	forged doomReason = "forged"
)

// judge decides whether a Sandbox carrying the pool's label stays. Labels
// are never trusted for that: an orphan (no controller) stays only if its
// spec really is the template's rendering and was never edited; a member
// controlled by the pool (by UID) is vetted by content (vetting.Judge,
// memoised in the registry so a pass costs one map lookup per known
// member). Under Recreate, a genuine member of an older template version,
// or of another template (the template name selects the NetworkPolicy, so
// repointing a pool is a rollout even to an identical template), goes too.
func (r *Reconciler) judge(pool *extv1beta1.SandboxWarmPool, ti *templateInfo, sb *sandboxv1beta1.Sandbox, orphan, recreate bool) doomReason {
	refStale := sb.Labels[labels.SandboxTemplateRefHash] != labels.NameHash(ti.tmpl.Name)
	if orphan {
		if refStale || vetting.Edited(sb) || !vetting.MatchesRendering(ti.tmpl, sb, r.vetted.DeliveryKey()) {
			return forged
		}
		return keep
	}
	switch vetting.Judge(r.vetted, pool, ti.tmpl, ti.blueprintHash, sb) {
	case vetting.Forged:
		return forged
	case vetting.Stale:
		if recreate {
			return stale
		}
	}
	if recreate && refStale {
		return stale
	}
	return keep
}

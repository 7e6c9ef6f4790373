package warmpool

import (
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/template"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// staleness decides, within one pass, whether members still reflect the
// pool's template. Pool-owned members are trusted to carry honest hash
// labels, so a matching label is enough and the semantic comparison is
// memoised per label value. Orphans are not trusted: anyone who can create
// a Sandbox can forge the labels, so an orphan is current only if its
// blueprint really matches the template.
type staleness struct {
	ti   *templateInfo
	memo map[string]bool // sandbox-template-hash label value -> stale
}

func newStaleness(ti *templateInfo) *staleness {
	return &staleness{ti: ti, memo: map[string]bool{}}
}

func (s *staleness) isStale(sb *sandboxv1beta1.Sandbox, orphan bool) bool {
	tmpl := s.ti.tmpl
	// Repointing the pool at another template, even an identical one,
	// is a rollout: the NetworkPolicy selector follows the template name.
	if sb.Labels[labels.SandboxTemplateRefHash] != labels.NameHash(tmpl.Name) {
		return true
	}
	if orphan {
		return !template.BlueprintMatches(tmpl, sb)
	}
	cur := s.ti.blueprintHash
	got := sb.Labels[labels.SandboxTemplateHash]
	if cur == "" || got == cur {
		return false
	}
	if stale, ok := s.memo[got]; ok && got != "" {
		return stale
	}
	stale := !template.BlueprintMatches(tmpl, sb)
	if got != "" {
		s.memo[got] = stale
	}
	return stale
}

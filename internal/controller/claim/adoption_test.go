package claim

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func poolRef(name string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxWarmPool", Name: name, UID: "pool-uid", Controller: ptr.To(true)}
}

// warmMember is a pool Sandbox as the pool controller creates it.
func warmMember(name string) *sandboxv1beta1.Sandbox {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ns", ResourceVersion: "42",
		OwnerReferences: []metav1.OwnerReference{poolRef("pool")},
		Labels: map[string]string{
			labels.WarmPoolSandbox: labels.NameHash("pool"), labels.SandboxTemplateRefHash: labels.NameHash("tmpl"),
			labels.SandboxTemplateHash: "aaaa", labels.SandboxPodTemplateHash: "bbbb", labels.LaunchType: "warm", labels.CreatedBy: "controller",
		},
		Annotations: map[string]string{labels.SandboxTemplateRef: "tmpl", labels.SafeToEvict: "true"},
	}}
	sb.Spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{
		Labels: map[string]string{"team": "a", labels.WarmPoolSandbox: labels.NameHash("pool")},
	}
	return sb
}

func testClaim() *extv1beta1.SandboxClaim {
	return &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "claim-uid", Generation: 3},
		Spec:       extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: "pool"}},
	}
}

func tmplWithMeta(l, a map[string]string) *extv1beta1.SandboxTemplate {
	t := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"}}
	t.Spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: l, Annotations: a}
	return t
}

type patchShape struct {
	Metadata struct {
		ResourceVersion string                  `json:"resourceVersion"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		Labels          map[string]*string      `json:"labels"`
		Annotations     map[string]*string      `json:"annotations"`
		ManagedFields   []map[string]any        `json:"managedFields"`
	} `json:"metadata"`
	Spec *struct {
		PodTemplate struct {
			Metadata struct {
				Labels      map[string]*string `json:"labels"`
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		} `json:"podTemplate"`
	} `json:"spec"`
}

func decode(t *testing.T, b []byte) patchShape {
	t.Helper()
	var p patchShape
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAdoptionPatchMetadata(t *testing.T) {
	claim := testClaim()
	claim.Labels = map[string]string{labels.CreatedBy: "python-client"}
	claim.Annotations = map[string]string{labels.TraceContext: `{"traceparent":"00-x"}`}
	sb := warmMember("pool-abcde")
	sb.Annotations[labels.PodName] = "stale"
	b, err := adoptionPatch(claim, sb, &warmSource{tmpl: tmplWithMeta(map[string]string{"team": "a"}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	p := decode(t, b)
	m := p.Metadata
	if m.ResourceVersion != "42" {
		t.Error("the patch must carry the candidate's resourceVersion: it is the reservation")
	}
	if len(m.ManagedFields) != 1 || len(m.ManagedFields[0]) != 0 {
		t.Errorf("managedFields = %v, want the reset marker [{}]", m.ManagedFields)
	}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].Kind != "SandboxClaim" || m.OwnerReferences[0].UID != "claim-uid" ||
		!ptr.Deref(m.OwnerReferences[0].Controller, false) {
		t.Errorf("owner refs = %+v", m.OwnerReferences)
	}
	for _, k := range []string{labels.WarmPoolSandbox, labels.SandboxTemplateHash, labels.SandboxPodTemplateHash} {
		if v, ok := m.Labels[k]; !ok || v != nil {
			t.Errorf("label %s not removed", k)
		}
	}
	want := map[string]string{labels.LaunchType: "warm", labels.ClaimUID: "claim-uid", labels.CreatedBy: "python-client"}
	for k, v := range want {
		if m.Labels[k] == nil || *m.Labels[k] != v {
			t.Errorf("label %s = %v, want %s", k, m.Labels[k], v)
		}
	}
	if _, touched := m.Labels[labels.SandboxTemplateRefHash]; touched {
		t.Error("template-ref-hash rewritten although present")
	}
	if *m.Annotations[labels.PodName] != "pool-abcde" || *m.Annotations[labels.TraceContext] != `{"traceparent":"00-x"}` {
		t.Errorf("annotations = %v", m.Annotations)
	}
	// The pool's safe-to-evict mark goes with the metadata; the pod
	// template stays as it is, so the generation does not move.
	if v, ok := m.Annotations[labels.SafeToEvict]; !ok || v != nil {
		t.Errorf("safe-to-evict mark not removed: %s", b)
	}
	if p.Spec != nil {
		t.Errorf("spec touched (a generation bump, so one more status write): %s", b)
	}
}

// A warm Sandbox created by an older pool controller carries the mark in
// its pod template; adoption still removes it there.
func TestAdoptionPatchRemovesLegacyPodTemplateSafeToEvict(t *testing.T) {
	sb := warmMember("pool-abcde")
	delete(sb.Annotations, labels.SafeToEvict)
	sb.Spec.PodTemplate.ObjectMeta.Annotations = map[string]string{labels.SafeToEvict: "true"}
	b, err := adoptionPatch(testClaim(), sb, &warmSource{tmpl: tmplWithMeta(map[string]string{"team": "a"}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	p := decode(t, b)
	if p.Spec == nil {
		t.Fatalf("legacy safe-to-evict not removed: %s", b)
	}
	if v, ok := p.Spec.PodTemplate.Metadata.Annotations[labels.SafeToEvict]; !ok || v != nil {
		t.Fatalf("legacy safe-to-evict not removed: %s", b)
	}
}

func TestAdoptionPatchLeavesSpecAloneWhenNothingVisibleChanges(t *testing.T) {
	sb := warmMember("pool-abcde")
	delete(sb.Annotations, labels.SafeToEvict) // eviction flag off
	b, err := adoptionPatch(testClaim(), sb, &warmSource{tmpl: tmplWithMeta(map[string]string{"team": "a"}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if p := decode(t, b); p.Spec != nil {
		t.Fatalf("spec touched (a generation bump) although the Pod's metadata stays: %s", b)
	}
	if _, ok := decode(t, b).Metadata.Annotations[labels.SafeToEvict]; ok {
		t.Errorf("safe-to-evict written although the Sandbox has none: %s", b)
	}
	// created-by is removed when the claim has none.
	if p := decode(t, b); p.Metadata.Labels[labels.CreatedBy] != nil {
		t.Errorf("created-by not removed: %s", b)
	}
}

func TestAdoptionPatchSafeToEvict(t *testing.T) {
	cases := []struct {
		name    string
		tmpl    *extv1beta1.SandboxTemplate
		claimSE string
		current string
		want    *string // nil: removed/absent
	}{
		{"pool default removed", tmplWithMeta(nil, nil), "", "true", nil},
		{"template false preserved", tmplWithMeta(nil, map[string]string{labels.SafeToEvict: "false"}), "", "false", ptr.To("false")},
		{"template false preserved without template", nil, "", "false", ptr.To("false")},
		{"claim-supplied true preserved", tmplWithMeta(nil, nil), "true", "true", ptr.To("true")},
		{"pool true removed without template", nil, "", "true", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			claim := testClaim()
			if c.claimSE != "" {
				claim.Spec.AdditionalPodMetadata.Annotations = map[string]string{labels.SafeToEvict: c.claimSE}
			}
			sb := warmMember("s")
			sb.Spec.PodTemplate.ObjectMeta.Annotations = map[string]string{labels.SafeToEvict: c.current}
			if c.tmpl != nil {
				c.tmpl.Spec.PodTemplate.ObjectMeta.Labels = map[string]string{"team": "a"}
			}
			_, wantA, err := desiredPodMetadata(sb.Spec.PodTemplate.ObjectMeta, c.tmpl, claim)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := wantA[labels.SafeToEvict]
			if (c.want == nil) == ok || (ok && got != *c.want) {
				t.Fatalf("safe-to-evict = %q (present %v), want %v", got, ok, ptr.Deref(c.want, "<absent>"))
			}
		})
	}
}

func TestAdoptionMergesClaimMetadata(t *testing.T) {
	claim := testClaim()
	claim.Spec.AdditionalPodMetadata.Labels = map[string]string{"sandbox.users.io/user": "alice"}
	sb := warmMember("s")
	b, err := adoptionPatch(claim, sb, &warmSource{tmpl: tmplWithMeta(map[string]string{"team": "a"}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	p := decode(t, b)
	if p.Spec == nil || *p.Spec.PodTemplate.Metadata.Labels["sandbox.users.io/user"] != "alice" || *p.Spec.PodTemplate.Metadata.Labels[labels.ClaimUID] != "claim-uid" {
		t.Fatalf("claim metadata not merged: %s", b)
	}
	// Overriding a template value is refused.
	claim.Spec.AdditionalPodMetadata.Labels = map[string]string{"team": "b"}
	if _, err := adoptionPatch(claim, sb, &warmSource{tmpl: tmplWithMeta(map[string]string{"team": "a"}, nil)}); err == nil {
		t.Fatal("override of a template label accepted")
	}
}

// Warm-pool poisoning: only Sandboxes controlled by a SandboxWarmPool, in
// the claim's namespace and pool, not being deleted and carrying both pool
// labels are candidates.
func TestCandidateChecks(t *testing.T) {
	now := metav1.NewTime(time.Now())
	cases := []struct {
		name string
		edit func(*sandboxv1beta1.Sandbox)
		want string
	}{
		{"genuine member", func(*sandboxv1beta1.Sandbox) {}, ""},
		{"v1alpha1-era owner reference still counts", func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences[0].APIVersion = "extensions.agents.x-k8s.io/v1alpha1"
		}, ""},
		{"owner reference of a version nobody serves", func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences[0].APIVersion = "extensions.agents.x-k8s.io/v0nonexistent"
		}, "not adoptable"},
		{"unowned with pool labels", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences = nil }, "not adoptable"},
		{"owned by another kind", func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences[0].Kind = "ReplicaSet"
			sb.OwnerReferences[0].APIVersion = "apps/v1"
		}, "not adoptable"},
		{"same kind, other group", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences[0].APIVersion = "evil.example/v1" }, "not adoptable"},
		{"pool ref but not controller", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences[0].Controller = nil }, "not adoptable"},
		{"deleting", func(sb *sandboxv1beta1.Sandbox) { sb.DeletionTimestamp = &now }, "not adoptable"},
		{"missing pool label", func(sb *sandboxv1beta1.Sandbox) { delete(sb.Labels, labels.WarmPoolSandbox) }, "not adoptable"},
		{"missing template-ref-hash", func(sb *sandboxv1beta1.Sandbox) { delete(sb.Labels, labels.SandboxTemplateRefHash) }, "not adoptable"},
		{"other namespace", func(sb *sandboxv1beta1.Sandbox) { sb.Namespace = "other" }, "cross-namespace adoption forbidden"},
		{"other pool", func(sb *sandboxv1beta1.Sandbox) { sb.OwnerReferences[0].Name = "other" }, `belongs to pool "other", not "pool"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := warmMember("s")
			c.edit(sb)
			if got := verifyCandidate(sb, testClaim()); got != c.want {
				t.Fatalf("verifyCandidate = %q, want %q", got, c.want)
			}
		})
	}
}

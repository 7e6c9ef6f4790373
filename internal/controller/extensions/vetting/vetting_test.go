package vetting

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
)

func tmpl(image string) *extv1beta1.SandboxTemplate {
	t := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	t.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "main", Image: image}}
	return t
}

func rendered(t *extv1beta1.SandboxTemplate, uid string) *sandboxv1beta1.Sandbox {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: k8stypes.UID("sb-" + uid), Generation: 1}}
	t.Spec.SandboxBlueprint.DeepCopyInto(&sb.Spec.SandboxBlueprint)
	blueprint.ApplySecureDefaults(t, &sb.Spec.PodTemplate.Spec)
	return sb
}

func TestJudge(t *testing.T) {
	pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{UID: "pool-uid"}}
	v1, v2 := tmpl("img:1"), tmpl("img:2")
	h1, h2 := blueprint.Hash(v1), blueprint.Hash(v2)

	reg := NewRegistry()
	cur := rendered(v1, "a")
	if got := Judge(reg, pool, v1, h1, cur); got != Current {
		t.Fatalf("rendering of the current template: %v", got)
	}
	if _, ok := reg.Lookup(pool.UID, cur.UID); !ok {
		t.Fatal("a fresh match is not memoised")
	}
	// The template moves on: the vouched-for member is stale, not forged.
	if got := Judge(reg, pool, v2, h2, cur); got != Stale {
		t.Fatalf("vouched-for member of an older template: %v", got)
	}
	// Without the registry's word the same content is unverifiable.
	if got := Judge(NewRegistry(), pool, v2, h2, rendered(v1, "b")); got != Forged {
		t.Fatalf("unvouched member of an older template: %v", got)
	}
	// An edit (generation bump) voids the registry's word.
	edited := cur.DeepCopy()
	edited.Generation = 2
	if got := Judge(reg, pool, v1, h1, edited); got != Forged {
		t.Fatalf("edited member: %v", got)
	}
	// Content that is not a rendering, whatever labels it carries.
	tampered := rendered(v1, "c")
	tampered.Spec.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true)
	if got := Judge(reg, pool, v1, h1, tampered); got != Forged {
		t.Fatalf("tampered content: %v", got)
	}
	expiring := rendered(v1, "d")
	expiring.Spec.ShutdownTime = &metav1.Time{}
	if got := Judge(reg, pool, v1, h1, expiring); got != Forged {
		t.Fatalf("a shutdown time is not the pool's rendering: %v", got)
	}
	// Another pool's word does not count.
	other := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{UID: "other"}}
	if got := Judge(reg, other, nil, "", cur); got != Forged {
		t.Fatalf("vouched for by another pool, no template: %v", got)
	}
	if got := Judge(reg, pool, nil, "", cur); got != Unknown {
		t.Fatalf("vouched for, no template: %v", got)
	}
}

func TestRegistryRetain(t *testing.T) {
	reg := NewRegistry()
	reg.Record("p", "old", "h")
	reg.Record("p", "young", "h")
	reg.Record("p", "kept", "h")
	past := reg.now().Add(-2 * retainGrace)
	reg.pools["p"]["old"] = record{hash: "h", at: past}
	reg.pools["p"]["kept"] = record{hash: "h", at: past}
	reg.Retain("p", func(uid k8stypes.UID) bool { return uid == "kept" })
	if _, ok := reg.Lookup("p", "old"); ok {
		t.Error("a gone member's old record was kept")
	}
	if _, ok := reg.Lookup("p", "young"); !ok {
		t.Error("a young record was dropped (the pool's own create may not be listed yet)")
	}
	if _, ok := reg.Lookup("p", "kept"); !ok {
		t.Error("a listed member's record was dropped")
	}
	reg.ForgetPool("p")
	if reg.Len("p") != 0 {
		t.Error("ForgetPool kept records")
	}
}

// BenchmarkJudge prints the per-candidate cost of the trust decision: a
// member the pool created or already compared (the warm claim hot path)
// and one compared from scratch (the first pass after a restart).
func BenchmarkJudge(b *testing.B) {
	pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{UID: "pool-uid"}}
	v1 := tmpl("img:1")
	h1 := blueprint.Hash(v1)
	sb := rendered(v1, "a")
	b.Run("vouched", func(b *testing.B) {
		reg := NewRegistry()
		reg.Record(pool.UID, sb.UID, h1)
		for b.Loop() {
			if Judge(reg, pool, v1, h1, sb) != Current {
				b.Fatal("not current")
			}
		}
	})
	b.Run("compared", func(b *testing.B) {
		for b.Loop() {
			if Judge(nil, pool, v1, h1, sb) != Current {
				b.Fatal("not current")
			}
		}
	})
}

// SpecMatches is the content half of the claimed-Sandbox check: every
// difference a tenant could plant is one, the controller's own bookkeeping
// and the apiserver's defaults are not.
func TestSpecMatches(t *testing.T) {
	want := rendered(tmpl("img:1"), "a").Spec
	want.PodTemplate.ObjectMeta.Labels = map[string]string{"team": "a"}
	same := func(edit func(*sandboxv1beta1.SandboxSpec)) bool {
		got := want.DeepCopy()
		edit(got)
		return SpecMatches(&want, got)
	}
	for name, edit := range map[string]func(*sandboxv1beta1.SandboxSpec){
		"system label": func(s *sandboxv1beta1.SandboxSpec) {
			s.PodTemplate.ObjectMeta.Labels["agents.x-k8s.io/claim-uid"] = "u"
		},
		"defaulted mode": func(s *sandboxv1beta1.SandboxSpec) { s.OperatingMode = sandboxv1beta1.OperatingModeRunning },
		"empty annotations": func(s *sandboxv1beta1.SandboxSpec) {
			s.PodTemplate.ObjectMeta.Annotations = map[string]string{}
		},
	} {
		if !same(edit) {
			t.Errorf("%s: a difference that is not one", name)
		}
	}
	for name, edit := range map[string]func(*sandboxv1beta1.SandboxSpec){
		"env": func(s *sandboxv1beta1.SandboxSpec) {
			s.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PLANTED", Value: "x"}}
		},
		"token":      func(s *sandboxv1beta1.SandboxSpec) { s.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true) },
		"user label": func(s *sandboxv1beta1.SandboxSpec) { s.PodTemplate.ObjectMeta.Labels["team"] = "b" },
		"annotation": func(s *sandboxv1beta1.SandboxSpec) {
			s.PodTemplate.ObjectMeta.Annotations = map[string]string{"x": "y"}
		},
		"volume": func(s *sandboxv1beta1.SandboxSpec) {
			s.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{{}}
		},
		"service":  func(s *sandboxv1beta1.SandboxSpec) { s.Service = ptr.To(true) },
		"shutdown": func(s *sandboxv1beta1.SandboxSpec) { s.ShutdownTime = &metav1.Time{} },
		"mode":     func(s *sandboxv1beta1.SandboxSpec) { s.OperatingMode = sandboxv1beta1.OperatingModeSuspended },
	} {
		if same(edit) {
			t.Errorf("%s: a planted difference is not seen", name)
		}
	}
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: *want.DeepCopy()}
	if IsRenderedAs(&want, sb) {
		t.Error("an edited Sandbox counts as a rendering")
	}
	sb.Generation = 1
	if !IsRenderedAs(&want, sb) {
		t.Error("an unedited rendering is refused")
	}
}

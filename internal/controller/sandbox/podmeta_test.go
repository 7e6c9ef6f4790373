package sandbox

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func ownedByKind(sb *sandboxv1beta1.Sandbox, apiVersion, kind string) *sandboxv1beta1.Sandbox {
	yes := true
	sb.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "u", Controller: &yes}}
	return sb
}

func TestNewPodMetadata(t *testing.T) {
	base := func() *sandboxv1beta1.Sandbox {
		sb := makeSandbox("ns", "s").podLabels("app", "x", labels.SandboxNameHash, "spoof", labels.ClaimUID, "c").
			podAnnotations("note", "n", labels.TraceContext, "{}").obj()
		sb.Labels = map[string]string{labels.WarmPoolSandbox: "pool", labels.SandboxTemplateRefHash: "tmpl", labels.CreatedBy: "python-client", "other": "o"}
		return sb
	}
	cases := []struct {
		name      string
		sb        *sandboxv1beta1.Sandbox
		wantLabel map[string]string // "" = absent
	}{
		{"standalone", base(), map[string]string{
			"app": "x", labels.SandboxNameHash: labels.NameHash("s"), labels.ClaimUID: "",
			labels.WarmPoolSandbox: "", labels.SandboxTemplateRefHash: "", labels.CreatedBy: "python-client", "other": "",
		}},
		{"pool owned", ownedByKind(base(), "extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"), map[string]string{
			labels.WarmPoolSandbox: "pool", labels.SandboxTemplateRefHash: "tmpl",
		}},
		{"v1alpha1 pool owned", ownedByKind(base(), "extensions.agents.x-k8s.io/v1alpha1", "SandboxWarmPool"), map[string]string{
			labels.WarmPoolSandbox: "pool",
		}},
		{"claim owned", ownedByKind(base(), "extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"), map[string]string{
			labels.WarmPoolSandbox: "", labels.SandboxTemplateRefHash: "tmpl",
		}},
		{"owned by another group", ownedByKind(base(), "apps/v1", "SandboxWarmPool"), map[string]string{
			labels.WarmPoolSandbox: "", labels.SandboxTemplateRefHash: "",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, a := newPodMetadata(tc.sb)
			for k, want := range tc.wantLabel {
				if got, ok := l[k]; want == "" && ok || want != "" && got != want {
					t.Errorf("label %s = %q (present %v), want %q", k, got, ok, want)
				}
			}
			if a[labels.PropagatedLabels] != "app" || a[labels.PropagatedAnnotations] != "note" {
				t.Errorf("tracking annotations = %v", a)
			}
			if _, ok := a[labels.TraceContext]; ok {
				t.Errorf("trace context propagated")
			}
		})
	}
}

func TestPodMetadataPatch(t *testing.T) {
	sb := makeSandbox("ns", "s").podLabels("a", "1").podAnnotations("n", "v").obj()
	str := func(s string) *string { return &s }
	cases := []struct {
		name        string
		podLabels   map[string]string
		podAnns     map[string]string
		wantLabels  map[string]*string
		wantAnnots  map[string]*string
		expectEmpty bool
	}{
		{"in sync", map[string]string{"a": "1", labels.SandboxNameHash: labels.NameHash("s")},
			map[string]string{"n": "v", labels.PropagatedLabels: "a", labels.PropagatedAnnotations: "n"}, nil, nil, true},
		{"tracking annotations missing and empty template", nil, nil, nil, nil, false},
		{"value drift and removed key", map[string]string{"a": "0", "b": "2", labels.SandboxNameHash: labels.NameHash("s")},
			map[string]string{"n": "v", labels.PropagatedLabels: "a,b", labels.PropagatedAnnotations: "n"},
			map[string]*string{"a": str("1"), "b": nil}, map[string]*string{labels.PropagatedLabels: str("a")}, false},
		{"stale system key scrubbed, foreign key kept", map[string]string{"a": "1", "webhook": "w", labels.WarmPoolSandbox: "p", labels.SandboxNameHash: labels.NameHash("s")},
			map[string]string{"n": "v", labels.PropagatedLabels: "a," + labels.WarmPoolSandbox, labels.PropagatedAnnotations: "n"},
			map[string]*string{labels.WarmPoolSandbox: nil}, map[string]*string{labels.PropagatedLabels: str("a")}, false},
		{"spoofed hash repaired", map[string]string{"a": "1", labels.SandboxNameHash: "deadbeef"},
			map[string]string{"n": "v", labels.PropagatedLabels: "a", labels.PropagatedAnnotations: "n"},
			map[string]*string{labels.SandboxNameHash: str(labels.NameHash("s"))}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lp, ap := podMetadataPatch(sb, tc.podLabels, tc.podAnns)
			if tc.expectEmpty {
				if len(lp)+len(ap) != 0 {
					t.Fatalf("want no patch, got %v %v", lp, ap)
				}
				return
			}
			check := func(kind string, got, want map[string]*string) {
				for k, w := range want {
					g, ok := got[k]
					switch {
					case !ok:
						t.Errorf("%s %s not patched", kind, k)
					case w == nil && g != nil:
						t.Errorf("%s %s = %q, want delete", kind, k, *g)
					case w != nil && (g == nil || *g != *w):
						t.Errorf("%s %s = %v, want %q", kind, k, g, *w)
					}
				}
				if _, ok := got["webhook"]; ok {
					t.Errorf("a key we never propagated was touched")
				}
			}
			check("label", lp, tc.wantLabels)
			check("annotation", ap, tc.wantAnnots)
		})
	}
}

func TestMergeVolumeClaimVolumes(t *testing.T) {
	vols := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, {Name: "cfg"}}
	if got := mergeVolumeClaimVolumes(vols, makeSandbox("ns", "s").obj()); len(got) != 2 {
		t.Errorf("no templates must be a no-op, got %v", got)
	}
	got := mergeVolumeClaimVolumes(vols, makeSandbox("ns", "s").vct("data").vct("extra").obj())
	if len(got) != 3 || got[0].Name != "cfg" || got[1].Name != "data" || got[2].Name != "extra" {
		t.Fatalf("volumes = %+v", got)
	}
	if got[1].PersistentVolumeClaim == nil || got[1].PersistentVolumeClaim.ClaimName != "data-s" || got[1].EmptyDir != nil {
		t.Errorf("conflicting template volume not replaced: %+v", got[1])
	}
}

// The pool's safe-to-evict mark reaches the Pod only while a pool controls
// the Sandbox, and leaves it with the adoption's relabel patch.
func TestSafeToEvictMarkFollowsPoolOwnership(t *testing.T) {
	const poolAPI = "extensions.agents.x-k8s.io/v1beta1"
	marked := func(kind string, tmplValue string) *sandboxv1beta1.Sandbox {
		b := makeSandbox("ns", "s")
		if tmplValue != "" {
			b = b.podAnnotations(labels.SafeToEvict, tmplValue)
		}
		sb := b.obj()
		sb.Annotations = map[string]string{labels.SafeToEvict: "true"}
		if kind != "" {
			sb = ownedByKind(sb, poolAPI, kind)
		}
		return sb
	}
	cases := []struct {
		name string
		sb   *sandboxv1beta1.Sandbox
		want string // "" = absent
	}{
		{"pool owned", marked("SandboxWarmPool", ""), "true"},
		{"claim owned", marked("SandboxClaim", ""), ""},
		{"standalone", marked("", ""), ""},
		{"template value wins", marked("SandboxWarmPool", "false"), "false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, a := newPodMetadata(tc.sb)
			if got := a[labels.SafeToEvict]; got != tc.want {
				t.Errorf("safe-to-evict = %q, want %q", got, tc.want)
			}
		})
	}

	// A warm Pod carries the mark; once a claim owns the Sandbox the next
	// metadata pass deletes it and rewrites the tracking annotation.
	l, a := newPodMetadata(marked("SandboxWarmPool", ""))
	if a[labels.PropagatedAnnotations] != labels.SafeToEvict {
		t.Fatalf("tracking annotation = %q", a[labels.PropagatedAnnotations])
	}
	_, ap := podMetadataPatch(marked("SandboxClaim", ""), l, a)
	if v, ok := ap[labels.SafeToEvict]; !ok || v != nil {
		t.Errorf("adopted Pod keeps safe-to-evict: patch %v", ap)
	}
	if v := ap[labels.PropagatedAnnotations]; v == nil || *v != "" {
		t.Errorf("tracking annotation not cleared: %v", v)
	}
	// A template-supplied value is not the pool's to remove.
	l, a = newPodMetadata(marked("SandboxWarmPool", "true"))
	if _, ap := podMetadataPatch(marked("SandboxClaim", "true"), l, a); len(ap) != 0 {
		t.Errorf("template safe-to-evict touched: %v", ap)
	}
}

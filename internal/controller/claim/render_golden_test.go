package claim

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	bt "sigs.k8s.io/agent-sandbox/internal/blueprint/blueprinttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// The whole Sandbox the cold path renders for a claim, field by field,
// for a few templates: a change in what a claim's Sandbox looks like
// fails here, whichever package does the rendering.
func TestColdRenderingGolden(t *testing.T) {
	richCold := func() sandboxv1beta1.SandboxSpec {
		s := bt.RichSpec()
		s.VolumeClaimTemplates = append(s.VolumeClaimTemplates, bt.VCT("data", "2Gi"))
		s.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}
		s.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{
			Labels: map[string]string{"team": "a", "extra": "1", labels.ClaimUID: "claim-uid-2",
				labels.SandboxTemplateRefHash: labels.NameHash("rich"), labels.CreatedBy: labels.CreatedByPythonClient},
			Annotations: map[string]string{"note": "n", "x": "y"},
		}
		return s
	}
	withPodMeta := func(s sandboxv1beta1.SandboxSpec, l, a map[string]string) sandboxv1beta1.SandboxSpec {
		s.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: l, Annotations: a}
		return s
	}
	coldMeta := func(claim *extv1beta1.SandboxClaim, tmpl string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: claim.Name, Namespace: bt.Namespace,
			Labels: map[string]string{labels.ClaimUID: string(claim.UID), labels.LaunchType: labels.LaunchTypeCold,
				labels.SandboxTemplateRefHash: labels.NameHash(tmpl)},
			Annotations:     map[string]string{labels.SandboxTemplateRef: tmpl},
			OwnerReferences: bt.OwnerRef("SandboxClaim", claim.Name, string(claim.UID)),
		}
	}
	plain := bt.PlainClaim()
	cases := []struct {
		name  string
		tmpl  func() *extv1beta1.SandboxTemplate
		claim *extv1beta1.SandboxClaim
		want  *sandboxv1beta1.Sandbox
	}{
		{"minimal, plain claim", bt.Minimal, plain, &sandboxv1beta1.Sandbox{
			ObjectMeta: coldMeta(plain, "py"),
			Spec: withPodMeta(bt.MinimalSpec(),
				map[string]string{labels.ClaimUID: "claim-uid-1", labels.SandboxTemplateRefHash: labels.NameHash("py")}, nil),
		}},
		{"rich, plain claim", bt.Rich, plain, &sandboxv1beta1.Sandbox{
			ObjectMeta: coldMeta(plain, "rich"),
			Spec: withPodMeta(bt.RichSpec(),
				map[string]string{"team": "a", labels.ClaimUID: "claim-uid-1", labels.SandboxTemplateRefHash: labels.NameHash("rich")},
				map[string]string{"note": "n"}),
		}},
		{"rich, rich claim", bt.Rich, bt.RichClaim(), func() *sandboxv1beta1.Sandbox {
			m := coldMeta(bt.RichClaim(), "rich")
			m.Labels[labels.CreatedBy] = labels.CreatedByPythonClient
			m.Annotations[labels.TraceContext] = "00-trace-span-01"
			return &sandboxv1beta1.Sandbox{ObjectMeta: m, Spec: richCold()}
		}()},
		{"windows, plain claim", bt.Windows, plain, &sandboxv1beta1.Sandbox{
			ObjectMeta: coldMeta(plain, "win"),
			Spec: withPodMeta(bt.WindowsSpec(),
				map[string]string{labels.ClaimUID: "claim-uid-1", labels.SandboxTemplateRefHash: labels.NameHash("win")},
				map[string]string{labels.SafeToEvict: "false"}),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := c.tmpl()
			got, err := buildColdSandbox(c.claim, tmpl)
			if err != nil {
				t.Fatal(err)
			}
			if d := bt.Diff(c.want, got); d != "" {
				t.Errorf("cold Sandbox %s", d)
			}
			if d := bt.Diff(c.tmpl(), tmpl); d != "" {
				t.Errorf("rendering changed the template %s", d)
			}
		})
	}
}

// What the cold path refuses, with the reason the claim reports.
func TestColdRenderingRefusals(t *testing.T) {
	withEnv := bt.PlainClaim()
	withEnv.Spec.Env = []extv1beta1.EnvVar{{Name: "B", Value: "2"}}
	withVCT := bt.PlainClaim()
	withVCT.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{bt.VCT("data", "1Gi")}
	overVCT := bt.PlainClaim()
	overVCT.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{bt.VCT("workspace", "5Gi")}
	overLabel := bt.PlainClaim()
	overLabel.Spec.AdditionalPodMetadata.Labels = map[string]string{"team": "b"}
	overAnnotation := bt.PlainClaim()
	overAnnotation.Spec.AdditionalPodMetadata.Annotations = map[string]string{"note": "other"}
	overEnv := bt.PlainClaim()
	overEnv.Spec.Env = []extv1beta1.EnvVar{{Name: "A", Value: "2"}}
	// Wrong in several ways: volumes are reported first, then env, then
	// metadata.
	overAll := overEnv.DeepCopy()
	overAll.Spec.AdditionalPodMetadata.Labels = map[string]string{"team": "b"}
	overEnvAndLabel := overAll.DeepCopy()
	overAll.Spec.VolumeClaimTemplates = overVCT.Spec.VolumeClaimTemplates
	cases := []struct {
		name   string
		tmpl   func() *extv1beta1.SandboxTemplate
		claim  *extv1beta1.SandboxClaim
		reason string // "" for an error that is not a claimError
		msg    string
	}{
		{"env, Disallowed", bt.Minimal, withEnv, extv1beta1.ClaimReasonEnvVarsInjectionRejected, "not allowed by the template policy"},
		{"env override, Allowed", bt.Rich, overEnv, "", `override is not allowed by the template policy for variable "A"`},
		{"volume claim templates, Disallowed", bt.Minimal, withVCT, extv1beta1.ClaimReasonVolumeClaimTemplatesError, "disallowed by the template"},
		{"volume claim template override, Allowed", bt.Rich, overVCT, extv1beta1.ClaimReasonVolumeClaimTemplatesError, `cannot override template volume "workspace"`},
		{"pod label override", bt.Rich, overLabel, "", `label "team" is defined in template with value "a", but claim requests "b"`},
		{"pod annotation override", bt.Rich, overAnnotation, "", `annotation "note" is defined in template with value "n", but claim requests "other"`},
		{"env and label override: env first", bt.Rich, overEnvAndLabel, "", `override is not allowed by the template policy for variable "A"`},
		{"volume, env and label override: volume first", bt.Rich, overAll, extv1beta1.ClaimReasonVolumeClaimTemplatesError, `cannot override template volume "workspace"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb, err := buildColdSandbox(c.claim, c.tmpl())
			if err == nil {
				t.Fatalf("rendered %v, want an error", sb.Spec)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q, want it to say %q", err, c.msg)
			}
			ce, ok := asClaimError(err)
			switch {
			case c.reason == "" && ok:
				t.Errorf("error %q has reason %s, want a plain error", err, ce.reason)
			case c.reason != "" && (!ok || ce.reason != c.reason):
				t.Errorf("error %q (claimError %v), want reason %s", err, ok, c.reason)
			}
		})
	}
}

// The spec of a pool member after its adoption by a claim (what
// judgeClaimed accepts as the claim's warm Sandbox).
func TestWarmRenderingGolden(t *testing.T) {
	richWarm := bt.RichSpec()
	richWarm.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: latebind.KeyEnv, Value: "KEY"}}
	richWarm.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{
		Labels: map[string]string{"team": "a", "extra": "1"}, Annotations: map[string]string{"note": "n", "x": "y"}}
	richNoKey := bt.RichSpec()
	richNoKey.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{
		Labels: map[string]string{"team": "a", "extra": "1"}, Annotations: map[string]string{"note": "n", "x": "y"}}
	minimal := bt.MinimalSpec()
	minimal.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: map[string]string{}, Annotations: map[string]string{}}
	windows := bt.WindowsSpec()
	windows.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: map[string]string{}, Annotations: map[string]string{labels.SafeToEvict: "false"}}
	cases := []struct {
		name  string
		tmpl  func() *extv1beta1.SandboxTemplate
		claim *extv1beta1.SandboxClaim
		key   string
		want  sandboxv1beta1.SandboxSpec
	}{
		{"rich, with key", bt.Rich, bt.RichClaim(), "KEY", richWarm},
		{"rich, no key", bt.Rich, bt.RichClaim(), "", richNoKey},
		{"minimal: Disallowed takes no key", bt.Minimal, bt.PlainClaim(), "KEY", minimal},
		{"windows", bt.Windows, bt.PlainClaim(), "", windows},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := c.tmpl()
			got, err := warmRendering(c.claim, tmpl, c.key)
			if err != nil {
				t.Fatal(err)
			}
			if d := bt.Diff(&c.want, got); d != "" {
				t.Errorf("warm rendering %s", d)
			}
			if d := bt.Diff(c.tmpl(), tmpl); d != "" {
				t.Errorf("rendering changed the template %s", d)
			}
		})
	}
}

// BenchmarkColdRendering is the cost of rendering one claim's cold
// Sandbox from a rich template (go test -run '^$' -bench ColdRendering).
func BenchmarkColdRendering(b *testing.B) {
	tmpl, claim := bt.Rich(), bt.RichClaim()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildColdSandbox(claim, tmpl); err != nil {
			b.Fatal(err)
		}
	}
}

package remote

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	bt "sigs.k8s.io/agent-sandbox/internal/blueprint/blueprinttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// The whole Sandbox `agent-sandbox create --template` renders, field by
// field, for a few templates and flag sets: a change in what such a
// Sandbox looks like fails here, whichever package does the rendering.
func TestSandboxFromTemplateGolden(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	const nowAnnotation = "2026-01-02T03:04:05.123456789Z"
	full := Spec{
		Namespace: bt.Namespace, Template: "rich",
		Labels:         map[string]string{"test": "golden"},
		PodLabels:      map[string]string{"team": "b", "extra": "1"},
		PodAnnotations: map[string]string{"note": "other", "more": "m"},
		Env:            []corev1.EnvVar{{Name: "A", Value: "2"}, {Name: "C", Value: "3"}},
		ShutdownAfter:  90 * time.Second,
	}
	meta := func(name, generateName, tmpl string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: name, GenerateName: generateName, Namespace: bt.Namespace,
			Labels: map[string]string{labels.LaunchType: labels.LaunchTypeCold, labels.SandboxTemplateRefHash: labels.NameHash(tmpl),
				labels.CreatedBy: labels.CreatedByGoClient},
			Annotations: map[string]string{labels.SandboxTemplateRef: tmpl, labels.ClientFirstRequestedAt: nowAnnotation},
		}
	}
	richFull := func() *sandboxv1beta1.Sandbox {
		sb := &sandboxv1beta1.Sandbox{ObjectMeta: meta("", SandboxGenerateName, "rich"), Spec: bt.RichSpec()}
		sb.Labels["test"] = "golden"
		// Template values win over the flags; env flags replace.
		sb.Spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{
			Labels:      map[string]string{"team": "a", "extra": "1", labels.SandboxTemplateRefHash: labels.NameHash("rich")},
			Annotations: map[string]string{"note": "n", "more": "m"},
		}
		sb.Spec.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "2"}, {Name: "C", Value: "3"}}
		sb.Spec.ShutdownTime = ptr.To(metav1.NewTime(time.Date(2026, 1, 2, 3, 5, 35, 0, time.UTC)))
		sb.Spec.ShutdownPolicy = ptr.To(sandboxv1beta1.ShutdownPolicyDelete)
		return sb
	}
	minimalNamed := func() *sandboxv1beta1.Sandbox {
		sb := &sandboxv1beta1.Sandbox{ObjectMeta: meta("box", "", "py"), Spec: bt.MinimalSpec()}
		sb.Spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: map[string]string{labels.SandboxTemplateRefHash: labels.NameHash("py")}}
		return sb
	}
	// A user label replaces the CLI's own, created-by included.
	windowsRelabelled := func() *sandboxv1beta1.Sandbox {
		sb := &sandboxv1beta1.Sandbox{ObjectMeta: meta("w", "", "win"), Spec: bt.WindowsSpec()}
		sb.Labels[labels.CreatedBy] = "me"
		sb.Spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{
			Labels:      map[string]string{labels.SandboxTemplateRefHash: labels.NameHash("win")},
			Annotations: map[string]string{labels.SafeToEvict: "false"},
		}
		return sb
	}
	cases := []struct {
		name string
		tmpl func() *extv1beta1.SandboxTemplate
		spec Spec
		want *sandboxv1beta1.Sandbox
	}{
		{"rich, every flag", bt.Rich, full, richFull()},
		{"minimal, named", bt.Minimal, Spec{Namespace: bt.Namespace, Name: "box", Template: "py"}, minimalNamed()},
		{"windows, created-by relabelled", bt.Windows,
			Spec{Namespace: bt.Namespace, Name: "w", Template: "win", Labels: map[string]string{labels.CreatedBy: "me"}}, windowsRelabelled()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := c.tmpl()
			got := SandboxFromTemplate(tmpl, c.spec, now)
			if d := bt.Diff(c.want, got); d != "" {
				t.Errorf("Sandbox %s", d)
			}
			if d := bt.Diff(c.tmpl(), tmpl); d != "" {
				t.Errorf("rendering changed the template %s", d)
			}
		})
	}
}

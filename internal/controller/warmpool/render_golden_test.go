package warmpool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	bt "sigs.k8s.io/agent-sandbox/internal/blueprint/blueprinttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// The whole Sandbox a pool renders as a member, field by field, for a few
// templates, with and without the eviction mark and the late-binding key: a change in what a
// member looks like (including its hashes, which decide staleness) fails
// here, whichever package does the rendering.
func TestPoolRenderingGolden(t *testing.T) {
	poolLabels := func(tmpl, bpHash, podHash string) map[string]string {
		return map[string]string{
			labels.WarmPoolSandbox: labels.NameHash("pool"), labels.SandboxTemplateRefHash: labels.NameHash(tmpl),
			labels.SandboxPodTemplateHash: podHash, labels.SandboxTemplateHash: bpHash,
		}
	}
	member := func(tmpl, bpHash, podHash string, evict bool, spec sandboxv1beta1.SandboxSpec, podLabels, podAnnotations map[string]string) *sandboxv1beta1.Sandbox {
		l := poolLabels(tmpl, bpHash, podHash)
		l[labels.LaunchType] = labels.LaunchTypeWarm
		l[labels.CreatedBy] = labels.CreatedByController
		a := map[string]string{labels.SandboxTemplateRef: tmpl}
		if evict {
			a[labels.SafeToEvict] = "true"
		}
		pl := poolLabels(tmpl, bpHash, podHash)
		for k, v := range podLabels {
			pl[k] = v
		}
		spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: pl, Annotations: podAnnotations}
		return &sandboxv1beta1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "pool-", Namespace: bt.Namespace, Labels: l, Annotations: a,
				OwnerReferences: bt.OwnerRef("SandboxWarmPool", "pool", "pool-uid"),
			},
			Spec: spec,
		}
	}
	cases := []struct {
		name  string
		tmpl  func() *extv1beta1.SandboxTemplate
		evict bool
		key   string
		want  *sandboxv1beta1.Sandbox
	}{
		{"minimal, evictable", bt.Minimal, true, "",
			member("py", bt.MinimalBlueprintHash, bt.MinimalPodTemplateHash, true, bt.MinimalSpec(), nil, nil)},
		{"minimal, eviction off", bt.Minimal, false, "",
			member("py", bt.MinimalBlueprintHash, bt.MinimalPodTemplateHash, false, bt.MinimalSpec(), nil, nil)},
		{"rich, evictable", bt.Rich, true, "",
			member("rich", bt.RichBlueprintHash, bt.RichPodTemplateHash, true, bt.RichSpec(),
				map[string]string{"team": "a"}, map[string]string{"note": "n"})},
		// The late-binding key goes to the first container of a template
		// that allows claim env; the hashes stay the template's.
		{"rich, with the delivery key", bt.Rich, true, "KEY",
			member("rich", bt.RichBlueprintHash, bt.RichPodTemplateHash, true, func() sandboxv1beta1.SandboxSpec {
				s := bt.RichSpec()
				s.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: latebind.KeyEnv, Value: "KEY"}}
				return s
			}(), map[string]string{"team": "a"}, map[string]string{"note": "n"})},
		// A template that refuses claim env takes no key.
		{"minimal, delivery key refused", bt.Minimal, false, "KEY",
			member("py", bt.MinimalBlueprintHash, bt.MinimalPodTemplateHash, false, bt.MinimalSpec(), nil, nil)},
		// The template's own safe-to-evict wins: no mark on the Sandbox.
		{"windows, template says not evictable", bt.Windows, true, "",
			member("win", bt.WindowsBlueprintHash, bt.WindowsPodTemplateHash, false, bt.WindowsSpec(),
				nil, map[string]string{labels.SafeToEvict: "false"})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := c.tmpl()
			got := buildSandbox(bt.Pool(), newTemplateInfo(tmpl), c.evict, c.key)
			if d := bt.Diff(c.want, got); d != "" {
				t.Errorf("pool member %s", d)
			}
			if d := bt.Diff(c.tmpl(), tmpl); d != "" {
				t.Errorf("rendering changed the template %s", d)
			}
		})
	}
}

// BenchmarkPoolRendering is the cost of rendering the prototype member of
// one pass from a rich template (go test -run '^$' -bench PoolRendering).
func BenchmarkPoolRendering(b *testing.B) {
	tmpl, pool := bt.Rich(), bt.Pool()
	ti := newTemplateInfo(tmpl)
	b.ReportAllocs()
	for b.Loop() {
		buildSandbox(pool, ti, true, "KEY")
	}
}

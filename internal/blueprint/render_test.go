package blueprint

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

// rendering is a caller-neutral view of one renderer's output, so one
// table covers all three: the whole object is compared.
type rendering struct {
	name   string
	tmpl   func() *extv1beta1.SandboxTemplate
	render func(*extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox
	want   *sandboxv1beta1.Sandbox
}

func object(l, a map[string]string, spec sandboxv1beta1.SandboxSpec, podLabels, podAnnotations map[string]string) *sandboxv1beta1.Sandbox {
	spec.PodTemplate.ObjectMeta = sandboxv1beta1.PodMetadata{Labels: podLabels, Annotations: podAnnotations}
	return &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: a}, Spec: spec}
}

func withMainEnv(s sandboxv1beta1.SandboxSpec, env ...corev1.EnvVar) sandboxv1beta1.SandboxSpec {
	s.PodTemplate.Spec.Containers[0].Env = env
	return s
}

func withVCTs(s sandboxv1beta1.SandboxSpec, v ...sandboxv1beta1.PersistentVolumeClaimTemplate) sandboxv1beta1.SandboxSpec {
	s.VolumeClaimTemplates = v
	return s
}

func poolCases() []rendering {
	pool := func(evict bool, key string) func(*extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox {
		return func(t *extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox {
			return ForPool(t, Pool{Name: "pool", Hashes: HashesOf(t), SafeToEvict: evict, DeliveryKey: key})
		}
	}
	member := func(tmpl, bpHash, podHash string) (map[string]string, map[string]string) {
		sys := map[string]string{
			labels.WarmPoolSandbox: labels.NameHash("pool"), labels.SandboxTemplateRefHash: labels.NameHash(tmpl),
			labels.SandboxPodTemplateHash: podHash, labels.SandboxTemplateHash: bpHash,
		}
		l := map[string]string{labels.LaunchType: labels.LaunchTypeWarm, labels.CreatedBy: labels.CreatedByController}
		for k, v := range sys {
			l[k] = v
		}
		return l, sys
	}
	pyL, pyPod := member("py", bt.MinimalBlueprintHash, bt.MinimalPodTemplateHash)
	richL, richPod := member("rich", bt.RichBlueprintHash, bt.RichPodTemplateHash)
	richPod["team"] = "a"
	winL, winPod := member("win", bt.WindowsBlueprintHash, bt.WindowsPodTemplateHash)
	evictable := func(tmpl string) map[string]string {
		return map[string]string{labels.SandboxTemplateRef: tmpl, labels.SafeToEvict: "true"}
	}
	return []rendering{
		{"pool/minimal, evictable", bt.Minimal, pool(true, ""),
			object(pyL, evictable("py"), bt.MinimalSpec(), pyPod, nil)},
		{"pool/minimal, eviction off, key refused by Disallowed", bt.Minimal, pool(false, "KEY"),
			object(pyL, map[string]string{labels.SandboxTemplateRef: "py"}, bt.MinimalSpec(), pyPod, nil)},
		{"pool/rich, key", bt.Rich, pool(true, "KEY"),
			object(richL, evictable("rich"),
				withMainEnv(bt.RichSpec(), corev1.EnvVar{Name: "A", Value: "1"}, corev1.EnvVar{Name: latebind.KeyEnv, Value: "KEY"}),
				richPod, map[string]string{"note": "n"})},
		{"pool/windows, template refuses eviction", bt.Windows, pool(true, ""),
			object(winL, map[string]string{labels.SandboxTemplateRef: "win"}, bt.WindowsSpec(), winPod,
				map[string]string{labels.SafeToEvict: "false"})},
	}
}

func claimCases() []rendering {
	cold := func(claim *extv1beta1.SandboxClaim, in Claim) func(*extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox {
		return func(t *extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox { return ForClaim(t, claim, in) }
	}
	coldL := func(uid, tmpl string) map[string]string {
		return map[string]string{labels.ClaimUID: uid, labels.LaunchType: labels.LaunchTypeCold, labels.SandboxTemplateRefHash: labels.NameHash(tmpl)}
	}
	ref := func(tmpl string) map[string]string { return map[string]string{labels.SandboxTemplateRef: tmpl} }
	plain, rich := bt.PlainClaim(), bt.RichClaim()
	richL := coldL("claim-uid-2", "rich")
	richL[labels.CreatedBy] = labels.CreatedByPythonClient
	richA := ref("rich")
	richA[labels.TraceContext] = "00-trace-span-01"
	return []rendering{
		// The caller's decisions are taken as given; the claim's labels go
		// over them.
		{"claim/minimal, plain", bt.Minimal, cold(plain, Claim{}),
			object(coldL("claim-uid-1", "py"), ref("py"), bt.MinimalSpec(),
				map[string]string{labels.ClaimUID: "claim-uid-1", labels.SandboxTemplateRefHash: labels.NameHash("py")}, nil)},
		{"claim/rich, every input", bt.Rich, cold(rich, Claim{
			VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{bt.VCT("workspace", "1Gi"), bt.VCT("data", "2Gi")},
			PodLabels:            map[string]string{"team": "a", "extra": "1", labels.ClaimUID: "forged"},
			PodAnnotations:       map[string]string{"note": "n", "x": "y"},
		}), object(richL, richA, withVCTs(bt.RichSpec(), bt.VCT("workspace", "1Gi"), bt.VCT("data", "2Gi")),
			map[string]string{"team": "a", "extra": "1", labels.ClaimUID: "claim-uid-2",
				labels.SandboxTemplateRefHash: labels.NameHash("rich"), labels.CreatedBy: labels.CreatedByPythonClient},
			map[string]string{"note": "n", "x": "y"})},
		// No annotations from the caller keep the template's (none here:
		// the pod template gets none, not an empty map).
		{"claim/rich, no annotations keep the template's", bt.Rich, cold(plain, Claim{PodAnnotations: map[string]string{}}),
			object(coldL("claim-uid-1", "rich"), ref("rich"), withVCTs(bt.RichSpec()),
				map[string]string{labels.ClaimUID: "claim-uid-1", labels.SandboxTemplateRefHash: labels.NameHash("rich")},
				map[string]string{"note": "n"})},
		{"claim/windows, plain", bt.Windows, cold(plain, Claim{PodLabels: map[string]string{labels.SandboxTemplateRefHash: "forged"}}),
			object(coldL("claim-uid-1", "win"), ref("win"), bt.WindowsSpec(),
				map[string]string{labels.ClaimUID: "claim-uid-1", labels.SandboxTemplateRefHash: labels.NameHash("win")},
				map[string]string{labels.SafeToEvict: "false"})},
	}
}

func directCases() []rendering {
	direct := func(d Direct) func(*extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox {
		return func(t *extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox { return ForDirect(t, d) }
	}
	directL := func(tmpl string) map[string]string {
		return map[string]string{labels.LaunchType: labels.LaunchTypeCold, labels.SandboxTemplateRefHash: labels.NameHash(tmpl)}
	}
	richL := directL("rich")
	richL["test"], richL[labels.CreatedBy] = "golden", labels.CreatedByGoClient
	relabelled := directL("py")
	relabelled[labels.SandboxTemplateRefHash] = "mine"
	return []rendering{
		{"direct/minimal, nothing added", bt.Minimal, direct(Direct{}),
			object(directL("py"), map[string]string{labels.SandboxTemplateRef: "py"}, bt.MinimalSpec(),
				map[string]string{labels.SandboxTemplateRefHash: labels.NameHash("py")}, nil)},
		// The template's pod metadata wins over the caller's.
		{"direct/rich, every input", bt.Rich, direct(Direct{
			Labels:         map[string]string{"test": "golden", labels.CreatedBy: labels.CreatedByGoClient},
			Annotations:    map[string]string{labels.ClientFirstRequestedAt: "then"},
			PodLabels:      map[string]string{"team": "b", "extra": "1"},
			PodAnnotations: map[string]string{"note": "other", "more": "m"},
		}), object(richL, map[string]string{labels.SandboxTemplateRef: "rich", labels.ClientFirstRequestedAt: "then"}, bt.RichSpec(),
			map[string]string{"team": "a", "extra": "1", labels.SandboxTemplateRefHash: labels.NameHash("rich")},
			map[string]string{"note": "n", "more": "m"})},
		// The creator may relabel its Sandbox, never its pods out of the
		// template's NetworkPolicy.
		{"direct/minimal, relabelled", bt.Minimal, direct(Direct{
			Labels:    map[string]string{labels.SandboxTemplateRefHash: "mine"},
			PodLabels: map[string]string{labels.SandboxTemplateRefHash: "mine"},
		}), object(relabelled, map[string]string{labels.SandboxTemplateRef: "py"}, bt.MinimalSpec(),
			map[string]string{labels.SandboxTemplateRefHash: labels.NameHash("py")}, nil)},
		{"direct/windows, pod annotations added", bt.Windows, direct(Direct{PodAnnotations: map[string]string{"more": "m"}}),
			object(directL("win"), map[string]string{labels.SandboxTemplateRef: "win"}, bt.WindowsSpec(),
				map[string]string{labels.SandboxTemplateRefHash: labels.NameHash("win")},
				map[string]string{labels.SafeToEvict: "false", "more": "m"})},
	}
}

// Every field each renderer sets, for each kind of template: what a pool
// member, a claim's cold start and a CLI Sandbox look like before the
// caller names and owns them.
func TestRenderings(t *testing.T) {
	var cases []rendering
	cases = append(cases, poolCases()...)
	cases = append(cases, claimCases()...)
	cases = append(cases, directCases()...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := c.tmpl()
			got := c.render(tmpl)
			if d := bt.Diff(c.want, got); d != "" {
				t.Errorf("rendering %s", d)
			}
			if d := bt.Diff(c.tmpl(), tmpl); d != "" {
				t.Errorf("rendering changed the template %s", d)
			}
			// Nothing of the rendering may alias the template (the
			// informer's shared object): edit every map and slice.
			got.Spec.PodTemplate.ObjectMeta.Labels["edited"] = "x"
			if a := got.Spec.PodTemplate.ObjectMeta.Annotations; a != nil {
				a["edited"] = "x"
			}
			got.Spec.PodTemplate.Spec.Containers[0].Image = "edited"
			got.Spec.PodTemplate.Spec.Containers[0].Env = append(got.Spec.PodTemplate.Spec.Containers[0].Env, corev1.EnvVar{Name: "edited"})
			for i := range got.Spec.VolumeClaimTemplates {
				got.Spec.VolumeClaimTemplates[i].Name = "edited"
			}
			if d := bt.Diff(c.tmpl(), tmpl); d != "" {
				t.Errorf("the rendering aliases the template %s", d)
			}
		})
	}
}

// The caller's inputs are copied, not aliased: one claim's rendering
// cannot change the maps the caller goes on using.
func TestRenderingsCopyCallerInputs(t *testing.T) {
	in := Claim{
		VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{bt.VCT("data", "1Gi")},
		PodLabels:            map[string]string{"a": "1"},
		PodAnnotations:       map[string]string{"b": "2"},
	}
	sb := ForClaim(bt.Rich(), bt.PlainClaim(), in)
	sb.Spec.PodTemplate.ObjectMeta.Annotations["edited"] = "x"
	sb.Spec.VolumeClaimTemplates[0].Name = "edited"
	if len(in.PodLabels) != 1 || len(in.PodAnnotations) != 1 || in.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("ForClaim changed or aliases its inputs: %+v", in)
	}
	d := Direct{Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "1"},
		PodLabels: map[string]string{"p": "1"}, PodAnnotations: map[string]string{"q": "1"}}
	sb = ForDirect(bt.Minimal(), d)
	sb.Labels["edited"], sb.Annotations["edited"] = "x", "x"
	sb.Spec.PodTemplate.ObjectMeta.Labels["edited"], sb.Spec.PodTemplate.ObjectMeta.Annotations["edited"] = "x", "x"
	if len(d.Labels) != 1 || len(d.Annotations) != 1 || len(d.PodLabels) != 1 || len(d.PodAnnotations) != 1 {
		t.Errorf("ForDirect changed or aliases its inputs: %+v", d)
	}
}

// Spec is the start of every rendering: the blueprint with the secure
// defaults, and the delivery key only for templates that allow claim env
// and do not place the key themselves.
func TestSpec(t *testing.T) {
	placed := bt.Rich()
	placed.Spec.PodTemplate.Spec.Containers[1].Env = []corev1.EnvVar{{Name: latebind.KeyEnv, Value: ""}}
	placedWant := bt.RichSpec()
	placedWant.PodTemplate.Spec.Containers[1].Env = []corev1.EnvVar{{Name: latebind.KeyEnv, Value: ""}}
	overrides := bt.Rich()
	overrides.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyOverrides
	withKey := withMainEnv(bt.RichSpec(), corev1.EnvVar{Name: "A", Value: "1"}, corev1.EnvVar{Name: latebind.KeyEnv, Value: "KEY"})
	cases := []struct {
		name string
		tmpl *extv1beta1.SandboxTemplate
		key  string
		want sandboxv1beta1.SandboxSpec
	}{
		{"minimal, no key", bt.Minimal(), "", bt.MinimalSpec()},
		{"minimal, Disallowed takes no key", bt.Minimal(), "KEY", bt.MinimalSpec()},
		{"rich, no key", bt.Rich(), "", bt.RichSpec()},
		{"rich, Allowed takes the key", bt.Rich(), "KEY", withKey},
		{"rich, Overrides takes the key", overrides, "KEY", withKey},
		{"rich, a template that places the key keeps its choice", placed, "KEY", placedWant},
		{"windows", bt.Windows(), "KEY", bt.WindowsSpec()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Spec(c.tmpl, c.key)
			want := c.want
			// Spec keeps the template's pod metadata for the renderers.
			want.PodTemplate.ObjectMeta = *c.tmpl.Spec.PodTemplate.ObjectMeta.DeepCopy()
			if d := bt.Diff(&want, &got); d != "" {
				t.Errorf("spec %s", d)
			}
		})
	}
}

// HashesOf agrees with the published hashes of the fixtures (literal in
// blueprinttest: a change in encoding rolls every pool).
func TestHashesOf(t *testing.T) {
	for name, want := range map[string]Hashes{
		"minimal": {bt.MinimalBlueprintHash, bt.MinimalPodTemplateHash},
		"rich":    {bt.RichBlueprintHash, bt.RichPodTemplateHash},
		"windows": {bt.WindowsBlueprintHash, bt.WindowsPodTemplateHash},
	} {
		if got := HashesOf(bt.Templates()[name]()); got != want {
			t.Errorf("%s: hashes %+v, want %+v", name, got, want)
		}
	}
}

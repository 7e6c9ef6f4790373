package latebind

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

func TestInjectKey(t *testing.T) {
	const key = "ed25519:AAAA"
	spec := func(env ...corev1.EnvVar) *corev1.PodSpec {
		return &corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Env: env}, {Name: "side"}}}
	}
	allowed, overrides := extv1beta1.EnvVarsInjectionPolicyAllowed, extv1beta1.EnvVarsInjectionPolicyOverrides

	// The template's env slice has room: an append in place would write
	// the key into the shared template.
	shared := make([]corev1.EnvVar, 1, 2)
	shared[0] = corev1.EnvVar{Name: "A", Value: "1"}
	s := spec()
	s.Containers[0].Env = shared
	if !InjectKey(allowed, s, key) {
		t.Fatal("nothing injected into an Allowed template")
	}
	if env := s.Containers[0].Env; len(env) != 2 || env[1] != (corev1.EnvVar{Name: KeyEnv, Value: key}) || len(s.Containers[1].Env) != 0 {
		t.Fatalf("containers after inject: %+v", s.Containers)
	}
	if shared[:2][1].Name == KeyEnv {
		t.Fatal("inject wrote into the template's env slice")
	}
	if !InjectKey(overrides, spec(), key) {
		t.Error("nothing injected into an Overrides template")
	}
	for name, tc := range map[string]struct {
		policy extv1beta1.EnvVarsInjectionPolicy
		spec   *corev1.PodSpec
		key    string
	}{
		"disallowed":        {extv1beta1.EnvVarsInjectionPolicyDisallowed, spec(), key},
		"unset policy":      {"", spec(), key},
		"no key":            {allowed, spec(), ""},
		"no container":      {allowed, &corev1.PodSpec{}, key},
		"template opts out": {allowed, spec(corev1.EnvVar{Name: KeyEnv}), key},
		"template's own key in a sidecar": {allowed, &corev1.PodSpec{Containers: []corev1.Container{{Name: "main"},
			{Name: "side", Env: []corev1.EnvVar{{Name: KeyEnv, Value: "ed25519:BBBB"}}}}}, key},
	} {
		before := tc.spec.DeepCopy()
		if WouldInjectKey(tc.policy, tc.spec, tc.key) || InjectKey(tc.policy, tc.spec, tc.key) {
			t.Errorf("%s: injected", name)
		}
		if len(before.Containers) > 0 && len(tc.spec.Containers[0].Env) != len(before.Containers[0].Env) {
			t.Errorf("%s: spec changed", name)
		}
	}
}

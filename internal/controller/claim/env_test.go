package claim

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

func envTemplate(policy extv1beta1.EnvVarsInjectionPolicy) *extv1beta1.SandboxTemplate {
	t := &extv1beta1.SandboxTemplate{}
	t.Spec.EnvVarsInjectionPolicy = policy
	t.Spec.PodTemplate.Spec = corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "INIT", Value: "1"}}}},
		Containers: []corev1.Container{
			{Name: "main", Env: []corev1.EnvVar{{Name: "EXISTING", Value: "old"}}},
			{Name: "side"},
		},
	}
	return t
}

func envOf(c *corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func TestInjectEnv(t *testing.T) {
	cases := []struct {
		name     string
		policy   extv1beta1.EnvVarsInjectionPolicy
		envFrom  string // container that gets an envFrom source
		env      []extv1beta1.EnvVar
		wantErr  string
		rejected bool // EnvVarsInjectionRejected rather than a plain error
		check    func(t *testing.T, spec *corev1.PodSpec)
	}{
		{name: "nothing to inject is always fine", policy: extv1beta1.EnvVarsInjectionPolicyDisallowed},
		{name: "disallowed", policy: extv1beta1.EnvVarsInjectionPolicyDisallowed, env: []extv1beta1.EnvVar{{Name: "A", Value: "1"}},
			wantErr: "environment variable injection is not allowed by the template policy", rejected: true},
		{name: "empty policy is disallowed", policy: "", env: []extv1beta1.EnvVar{{Name: "A", Value: "1"}},
			wantErr: "not allowed by the template policy", rejected: true},
		{name: "allowed adds to the first regular container", policy: extv1beta1.EnvVarsInjectionPolicyAllowed,
			env: []extv1beta1.EnvVar{{Name: "A", Value: "1"}},
			check: func(t *testing.T, s *corev1.PodSpec) {
				t.Helper()
				if envOf(&s.Containers[0])["A"] != "1" || len(s.Containers[1].Env) != 0 {
					t.Errorf("env = %+v", s.Containers)
				}
			}},
		{name: "allowed refuses an override", policy: extv1beta1.EnvVarsInjectionPolicyAllowed,
			env:     []extv1beta1.EnvVar{{Name: "EXISTING", Value: "new"}},
			wantErr: `environment variable override is not allowed by the template policy for variable "EXISTING"`},
		{name: "allowed refuses a container with envFrom", policy: extv1beta1.EnvVarsInjectionPolicyAllowed, envFrom: "main",
			env:     []extv1beta1.EnvVar{{Name: "A", Value: "1"}},
			wantErr: `container "main" uses EnvFrom sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables`, rejected: true},
		{name: "allowed refuses an init container with envFrom", policy: extv1beta1.EnvVarsInjectionPolicyAllowed, envFrom: "init",
			env:     []extv1beta1.EnvVar{{Name: "A", Value: "1", ContainerName: "init"}},
			wantErr: `container "init" uses EnvFrom`, rejected: true},
		{name: "overrides replaces in place and appends", policy: extv1beta1.EnvVarsInjectionPolicyOverrides, envFrom: "main",
			env: []extv1beta1.EnvVar{{Name: "EXISTING", Value: "new"}, {Name: "B", Value: "2"}},
			check: func(t *testing.T, s *corev1.PodSpec) {
				t.Helper()
				e := s.Containers[0].Env
				if len(e) != 2 || e[0].Name != "EXISTING" || e[0].Value != "new" || e[1].Name != "B" {
					t.Errorf("env = %+v", e)
				}
			}},
		{name: "per-container and init-container targets", policy: extv1beta1.EnvVarsInjectionPolicyAllowed,
			env: []extv1beta1.EnvVar{{Name: "S", Value: "s", ContainerName: "side"}, {Name: "I", Value: "i", ContainerName: "init"}},
			check: func(t *testing.T, s *corev1.PodSpec) {
				t.Helper()
				if envOf(&s.Containers[1])["S"] != "s" || envOf(&s.InitContainers[0])["I"] != "i" || envOf(&s.Containers[0])["S"] != "" {
					t.Errorf("spec = %+v", s)
				}
			}},
		{name: "unknown container", policy: extv1beta1.EnvVarsInjectionPolicyOverrides,
			env:     []extv1beta1.EnvVar{{Name: "X", Value: "1", ContainerName: "ghost"}},
			wantErr: `target container "ghost" not found in template for environment variable "X"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := envTemplate(c.policy)
			spec := tmpl.Spec.PodTemplate.Spec.DeepCopy()
			if c.envFrom != "" {
				for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
					for i := range list {
						if list[i].Name == c.envFrom {
							list[i].EnvFrom = []corev1.EnvFromSource{{Prefix: "X_"}}
						}
					}
				}
			}
			err := injectEnv(tmpl, spec, c.env)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c.check != nil {
					c.check(t, spec)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want %q", err, c.wantErr)
			}
			ce, isCE := asClaimError(err)
			if c.rejected != (isCE && ce.reason == extv1beta1.ClaimReasonEnvVarsInjectionRejected) {
				t.Fatalf("rejected = %v for %v", isCE, err)
			}
			if isCE && !strings.HasPrefix(ce.message, "environment variable injection rejected: ") {
				t.Errorf("message %q", ce.message)
			}
		})
	}
}

package claim

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// injectEnv applies a claim's environment variables to a pod spec copied
// from tmpl, as far as the template's envVarsInjectionPolicy allows:
//
//   - Disallowed (the default) refuses any variable;
//   - Allowed adds variables the template does not define, and refuses a
//     target container with envFrom, where it cannot tell whether a name is
//     already defined;
//   - Overrides also replaces template variables in place.
//
// A variable names its container (init or regular); without one it goes to
// the first regular container.
func injectEnv(tmpl *extv1beta1.SandboxTemplate, spec *corev1.PodSpec, env []extv1beta1.EnvVar) error {
	if len(env) == 0 {
		return nil
	}
	policy := tmpl.Spec.EnvVarsInjectionPolicy
	if policy != extv1beta1.EnvVarsInjectionPolicyAllowed && policy != extv1beta1.EnvVarsInjectionPolicyOverrides {
		return errEnvRejected("environment variable injection is not allowed by the template policy")
	}
	find := func(name string) *corev1.Container {
		for i := range spec.InitContainers {
			if spec.InitContainers[i].Name == name {
				return &spec.InitContainers[i]
			}
		}
		for i := range spec.Containers {
			if spec.Containers[i].Name == name {
				return &spec.Containers[i]
			}
		}
		return nil
	}
	targets := make([]*corev1.Container, len(env))
	for i, e := range env {
		switch {
		case e.ContainerName != "":
			targets[i] = find(e.ContainerName)
			if targets[i] == nil {
				return fmt.Errorf("target container %q not found in template for environment variable %q", e.ContainerName, e.Name)
			}
		case len(spec.Containers) > 0:
			targets[i] = &spec.Containers[0]
		default:
			return fmt.Errorf("template has no container for environment variable %q", e.Name)
		}
	}
	for i, e := range env {
		c := targets[i]
		idx := -1
		for j := range c.Env {
			if c.Env[j].Name == e.Name {
				idx = j
				break
			}
		}
		if policy == extv1beta1.EnvVarsInjectionPolicyAllowed {
			if len(c.EnvFrom) > 0 {
				return errEnvRejected(fmt.Sprintf("container %q uses EnvFrom sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables", c.Name))
			}
			if idx >= 0 {
				return fmt.Errorf("environment variable override is not allowed by the template policy for variable %q", e.Name)
			}
		}
		v := corev1.EnvVar{Name: e.Name, Value: e.Value}
		if idx >= 0 {
			c.Env[idx] = v
		} else {
			c.Env = append(c.Env, v)
		}
	}
	return nil
}

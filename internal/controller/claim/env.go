package claim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
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
		if ref := secretRef(e); ref != nil {
			// The kubelet resolves it; the value never enters the spec.
			v = corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}}
		}
		if idx >= 0 {
			c.Env[idx] = v
		} else {
			c.Env = append(c.Env, v)
		}
	}
	return nil
}

func secretRef(e extv1beta1.EnvVar) *extv1beta1.SecretKeySelector {
	if e.ValueFrom == nil {
		return nil
	}
	return e.ValueFrom.SecretKeyRef
}

// resolveEnv returns the claim's env with Secret references resolved. A
// Secret is used only if it opts in (ClaimEnvAllowedAnnotation): being
// able to create a claim must not mean being able to read every Secret of
// the namespace. It reads through the uncached API reader. With values
// false it checks the opt-in only and returns nothing.
func (r *Reconciler) resolveEnv(ctx context.Context, claim *extv1beta1.SandboxClaim, values bool) ([]latebind.Var, error) {
	var out []latebind.Var
	secrets := map[string]*corev1.Secret{}
	for _, e := range claim.Spec.Env {
		ref := secretRef(e)
		if ref == nil {
			out = append(out, latebind.Var{Name: e.Name, Value: e.Value})
			continue
		}
		sec, ok := secrets[ref.Name]
		if !ok {
			sec = &corev1.Secret{}
			if err := r.api.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: ref.Name}, sec); err != nil {
				switch {
				case apierrors.IsNotFound(err):
					return nil, errEnvRejected(fmt.Sprintf("Secret %q of variable %q not found", ref.Name, e.Name))
				case apierrors.IsForbidden(err):
					return nil, errEnvRejected(fmt.Sprintf("the controller may not read Secret %q of variable %q (grant it get on secrets in this namespace)", ref.Name, e.Name))
				}
				return nil, fmt.Errorf("getting Secret %q: %w", ref.Name, err)
			}
			if sec.Annotations[extv1beta1.ClaimEnvAllowedAnnotation] != "true" {
				return nil, errEnvRejected(fmt.Sprintf("Secret %q of variable %q does not allow claim env (annotation %s)", ref.Name, e.Name, extv1beta1.ClaimEnvAllowedAnnotation))
			}
			secrets[ref.Name] = sec
		}
		v, ok := sec.Data[ref.Key]
		if !ok {
			return nil, errEnvRejected(fmt.Sprintf("Secret %q has no key %q for variable %q", ref.Name, ref.Key, e.Name))
		}
		if values {
			out = append(out, latebind.Var{Name: e.Name, Value: string(v)})
		}
	}
	return out, nil
}

package latebind

import (
	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// InjectKey adds the controller's public key (KeyEnv=key) to the pod spec
// a warm pool renders from a template with the given env policy, so that
// the sandboxd of a plain template trusts this controller without any
// manual step. It is the one rule shared by the pool (which renders
// members), member vetting (which compares a member with that rendering)
// and the claim (which decides late binding from it), so the three cannot
// drift apart.
//
// The key goes into the first regular container, the one a claim's env
// without a container name targets (the cold path's rule too): claims that
// name another container cold-start with the reason. Nothing is injected
//
//   - when key is empty (late binding off);
//   - when the policy refuses claim env (Disallowed, or unset): no claim
//     could use it, and such templates keep exactly their old rendering;
//   - when any container of the template already lists KeyEnv: the template
//     chose where (and whether: an empty value opts a container that runs
//     no sandboxd out) the key goes.
//
// It reports whether it changed spec.
func InjectKey(policy extv1beta1.EnvVarsInjectionPolicy, spec *corev1.PodSpec, key string) bool {
	if !WouldInjectKey(policy, spec, key) {
		return false
	}
	c := &spec.Containers[0]
	// A fresh slice: spec may share its Env with a cached template.
	env := make([]corev1.EnvVar, 0, len(c.Env)+1)
	c.Env = append(append(env, c.Env...), corev1.EnvVar{Name: KeyEnv, Value: key})
	return true
}

// WouldInjectKey reports whether InjectKey would change spec, without
// touching it.
func WouldInjectKey(policy extv1beta1.EnvVarsInjectionPolicy, spec *corev1.PodSpec, key string) bool {
	if key == "" || len(spec.Containers) == 0 {
		return false
	}
	if policy != extv1beta1.EnvVarsInjectionPolicyAllowed && policy != extv1beta1.EnvVarsInjectionPolicyOverrides {
		return false
	}
	for i := range spec.Containers {
		for _, e := range spec.Containers[i].Env {
			if e.Name == KeyEnv {
				return false
			}
		}
	}
	return true
}

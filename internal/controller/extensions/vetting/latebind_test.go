package vetting

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// A pool that injects the controller's delivery key vouches for exactly
// that rendering: a member carrying another key (a tenant's, whose
// sandboxd would take env from the tenant), the key in another container,
// or a second copy of it is forged; a member rendered before the key
// (late binding was off) is genuine but stale.
func TestJudgeDeliveryKey(t *testing.T) {
	ours, _ := latebind.GenerateSigner()
	theirs, _ := latebind.GenerateSigner()
	key := ours.PublicKey()
	pool := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{UID: "pool-uid"}}
	tm := tmpl("img:1")
	tm.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	tm.Spec.PodTemplate.Spec.Containers = append(tm.Spec.PodTemplate.Spec.Containers, corev1.Container{Name: "side", Image: "img:1"})
	h := blueprint.Hash(tm)
	render := func(uid, k string, container int) Verdict {
		sb := rendered(tm, uid)
		if k != "" {
			c := &sb.Spec.PodTemplate.Spec.Containers[container]
			c.Env = append(c.Env, corev1.EnvVar{Name: latebind.KeyEnv, Value: k})
		}
		reg := NewRegistry()
		reg.SetDeliveryKey(key)
		return Judge(reg, pool, tm, h, sb)
	}
	if got := render("ours", key, 0); got != Current {
		t.Errorf("member with the injected key: %v, want current", got)
	}
	if got := render("theirs", theirs.PublicKey(), 0); got != Forged {
		t.Errorf("member with a tenant's key: %v, want forged", got)
	}
	if got := render("side", key, 1); got != Forged {
		t.Errorf("member with the key in another container: %v, want forged", got)
	}
	if got := render("keyless", "", 0); got != Stale {
		t.Errorf("member rendered before the key: %v, want stale", got)
	}
	twice := rendered(tm, "twice")
	latebind.InjectKey(tm.Spec.EnvVarsInjectionPolicy, &twice.Spec.PodTemplate.Spec, key)
	twice.Spec.PodTemplate.Spec.Containers[0].Env = append(twice.Spec.PodTemplate.Spec.Containers[0].Env, corev1.EnvVar{Name: latebind.KeyEnv, Value: theirs.PublicKey()})
	reg := NewRegistry()
	reg.SetDeliveryKey(key)
	if got := Judge(reg, pool, tm, h, twice); got != Forged {
		t.Errorf("member with our key and then a tenant's: %v, want forged", got)
	}
	// The keyless member stays stale on later passes, memoised.
	keyless := rendered(tm, "k2")
	if got := Judge(reg, pool, tm, h, keyless); got != Stale {
		t.Fatalf("keyless: %v", got)
	}
	if got := Judge(reg, pool, tm, h, keyless); got != Stale {
		t.Errorf("keyless on the second pass: %v, want stale", got)
	}
	// Without a key configured, a member carrying ours is not a rendering.
	injected := rendered(tm, "k3")
	latebind.InjectKey(tm.Spec.EnvVarsInjectionPolicy, &injected.Spec.PodTemplate.Spec, key)
	if got := Judge(NewRegistry(), pool, tm, h, injected); got != Forged {
		t.Errorf("member with a key, none configured: %v, want forged", got)
	}
	// A Disallowed template gets no key, and its members are compared as
	// before.
	plain := tmpl("img:1")
	sb := rendered(plain, "plain")
	if got := Judge(reg, pool, plain, blueprint.Hash(plain), sb); got != Current {
		t.Errorf("member of a Disallowed template: %v, want current", got)
	}
}

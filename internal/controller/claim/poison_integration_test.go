package claim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

const plantedEnv = "PLANTED"

// tamper is what the attacker puts in a Sandbox: an env var of its choice
// and the pod's service-account token, which the template does not mount.
func tamper(spec *corev1.PodSpec) {
	spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: plantedEnv, Value: "attacker"})
	spec.AutomountServiceAccountToken = ptr.To(true)
}

// plant creates a Sandbox that copies a genuine member's labels (pool
// label, template-ref-hash and the sandbox-template-hash rollout key) and
// spec, tampered, with a controller owner reference of kind SandboxWarmPool
// naming the pool, of the given apiVersion and UID.
func plant(w *world, name string, genuine *sandboxv1beta1.Sandbox, apiVersion string, uid types.UID) *sandboxv1beta1.Sandbox {
	w.t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{}}}
	for k, v := range genuine.Labels {
		sb.Labels[k] = v
	}
	sb.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: "SandboxWarmPool", Name: "pool", UID: uid, Controller: ptr.To(true)}}
	genuine.Spec.DeepCopyInto(&sb.Spec)
	tamper(&sb.Spec.PodTemplate.Spec)
	exttest.Create(w.t, w.c, sb)
	return sb
}

// TestPoisonedSandboxNotAdopted performs warm-pool poisoning (issue 16,
// finding 1) under both rollout strategies, with the attacker's Sandboxes
// the only Ready candidates when the claims arrive:
//
//   - forged-version: owner reference with a version nobody serves (the
//     garbage collector cannot resolve it) and a wrong UID;
//   - forged-uid: a served version but a wrong UID;
//   - copied-uid: the live pool's own UID (pools are readable), so only
//     the content check can tell it apart;
//   - the genuine member itself, its spec edited after creation.
//
// All four copy the sandbox-template-hash label. The claims must still be
// served (warm from a genuine member or cold), none of the attacker's
// Sandboxes may be bound, no bound pod may carry the planted env var or the
// token, and the pool deletes what presents itself as its member by UID
// (copied-uid, the tampered member) while it ignores Sandboxes controlled
// by another UID (not its own to delete; claims refuse them).
func TestPoisonedSandboxNotAdopted(t *testing.T) {
	for _, strategy := range []extv1beta1.UpdateStrategyType{extv1beta1.OnReplenishUpdateStrategyType, extv1beta1.RecreateUpdateStrategyType} {
		t.Run(string(strategy), func(t *testing.T) {
			w := newWorld(t, defaults())
			tmpl := exttest.NewTemplate(w.ns, "pool-tmpl")
			pool := exttest.NewPool(w.ns, "pool", tmpl.Name, 1)
			pool.Spec.UpdateStrategy = &extv1beta1.SandboxWarmPoolUpdateStrategy{Type: strategy}
			exttest.Create(t, w.c, tmpl, pool)
			exttest.Eventually(t, wait, func() error { return exttest.PoolReady(w.c, w.ns, "pool", 1) })
			members, err := exttest.PoolMembers(w.c, w.ns, "pool")
			if err != nil || len(members) != 1 {
				t.Fatalf("members: %v %v", members, err)
			}
			genuine := &members[0]
			if genuine.Labels[labels.SandboxTemplateHash] == "" {
				t.Fatal("genuine member has no sandbox-template-hash label to copy")
			}
			group := extv1beta1.GroupVersion.Group
			planted := []*sandboxv1beta1.Sandbox{
				plant(w, "forged-version", genuine, group+"/v0nonexistent", "00000000-0000-0000-0000-000000000bad"),
				plant(w, "forged-uid", genuine, group+"/v1beta1", "00000000-0000-0000-0000-000000000bad"),
				plant(w, "copied-uid", genuine, group+"/v1beta1", pool.UID),
			}
			// The tenant edits the real member after the pool created it.
			edited := genuine.DeepCopy()
			tamper(&edited.Spec.PodTemplate.Spec)
			if err := w.c.Update(context.Background(), edited); err != nil {
				t.Fatal(err)
			}
			if edited.Generation < 2 {
				t.Fatalf("spec edit left generation %d", edited.Generation)
			}
			bad := map[types.UID]string{edited.UID: edited.Name}
			for _, p := range planted {
				bad[p.UID] = p.Name
			}
			// Let the planted ones become Ready candidates (the Sandbox
			// controller runs their pods), so that only the refusal keeps
			// them from being adopted.
			for _, p := range planted[:2] {
				exttest.Eventually(t, wait, func() error {
					sb, err := w.sandbox(p.Name)
					if err != nil {
						return err
					}
					if !readyCond(sb) || len(sb.Status.PodIPs) == 0 {
						return fmt.Errorf("%s not Ready yet", p.Name)
					}
					return nil
				})
			}

			for i := 0; i < 3; i++ {
				w.claim(fmt.Sprintf("c%d", i), "pool", nil)
			}
			for i := 0; i < 3; i++ {
				name := fmt.Sprintf("c%d", i)
				sb := w.waitReady(name)
				if n, isBad := bad[sb.UID]; isBad {
					t.Errorf("claim %s adopted the attacker's sandbox %s", name, n)
					continue
				}
				pod := w.pod(sb.Name)
				if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
					t.Errorf("claim %s: pod mounts the service-account token", name)
				}
				for _, c := range pod.Spec.Containers {
					for _, e := range c.Env {
						if e.Name == plantedEnv {
							t.Errorf("claim %s: pod carries the planted env var", name)
						}
					}
				}
			}
			// No attacker's Sandbox is controlled by a claim, ever.
			for uid, name := range bad {
				sb, err := w.sandbox(name)
				if apierrors.IsNotFound(err) || (err == nil && sb.UID != uid) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if index.ControllerClaimUID(sb) != "" {
					t.Errorf("%s is controlled by a claim", name)
				}
			}
			// The pool deletes what presents itself as its member by UID
			// and is not its rendering...
			for _, name := range []string{"copied-uid", genuine.Name} {
				exttest.Eventually(t, wait, func() error {
					sb, err := w.sandbox(name)
					if apierrors.IsNotFound(err) || (err == nil && sb.DeletionTimestamp != nil) {
						return nil
					}
					if err != nil {
						return err
					}
					return fmt.Errorf("pool kept %s (generation %d)", name, sb.Generation)
				})
			}
			// ...and leaves alone what another UID controls.
			for _, name := range []string{"forged-version", "forged-uid"} {
				sb, err := w.sandbox(name)
				if err != nil || sb.DeletionTimestamp != nil {
					t.Errorf("%s: %v (deleting %v); a Sandbox controlled by another UID is not the pool's to delete", name, err, err == nil && sb.DeletionTimestamp != nil)
				}
			}
			// The pool is whole again, with its own rendering.
			exttest.Eventually(t, wait, func() error {
				if err := exttest.PoolReady(w.c, w.ns, "pool", 1); err != nil {
					return err
				}
				ms, err := exttest.PoolMembers(w.c, w.ns, "pool")
				if err != nil {
					return err
				}
				for _, m := range ms {
					if _, isBad := bad[m.UID]; isBad && index.ControllerClaimUID(&m) == "" && metav1.GetControllerOfNoCopy(&m).UID == pool.UID {
						return errors.New("the pool still counts " + m.Name)
					}
				}
				return nil
			})
		})
	}
}

// After a controller restart the registry of vetted members is empty: the
// pool's members are vetted again by content, so claims are still served
// warm and the pool deletes none of them.
func TestVettingSurvivesRestartForCurrentMembers(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 2, nil)
	before, err := exttest.PoolMembers(w.c, w.ns, "pool")
	if err != nil || len(before) != 2 {
		t.Fatalf("members: %d %v", len(before), err)
	}
	w.mgr.Stop()
	newWorldOn(w)
	w.claim("c1", "pool", nil)
	sb := w.waitReady("c1")
	if sb.Name == "c1" {
		t.Fatal("after a restart the claim went cold; the pool's members were not recognised")
	}
	for _, m := range before {
		if got, err := w.sandbox(m.Name); err == nil && got.DeletionTimestamp != nil && got.UID == m.UID {
			t.Errorf("the pool deleted its genuine member %s after the restart", m.Name)
		}
	}
}

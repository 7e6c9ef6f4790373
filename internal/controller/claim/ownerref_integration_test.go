package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// plantForClaim creates, as a tenant allowed to create Sandboxes could, a
// Sandbox whose controller reference names the claim (kind SandboxClaim,
// its readable UID, the given apiVersion), labelled like a claimed one,
// with spec copied from like and then edited by edit.
func plantForClaim(w *world, name string, c *extv1beta1.SandboxClaim, apiVersion string, like *sandboxv1beta1.Sandbox, edit func(*sandboxv1beta1.SandboxSpec)) *sandboxv1beta1.Sandbox {
	w.t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name,
		Labels: map[string]string{labels.ClaimUID: string(c.UID), labels.LaunchType: labels.LaunchTypeWarm},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: "SandboxClaim", Name: c.Name, UID: c.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
	}}
	like.Spec.DeepCopyInto(&sb.Spec)
	if edit != nil {
		edit(&sb.Spec)
	}
	exttest.Create(w.t, w.c, sb)
	return sb
}

func tamperSpec(spec *sandboxv1beta1.SandboxSpec) { tamper(&spec.PodTemplate.Spec) }

// gone reports whether the Sandbox with uid no longer exists (or is being
// deleted).
func (w *world) gone(name string, uid types.UID) error {
	sb, err := w.sandbox(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case sb.UID != uid || sb.DeletionTimestamp != nil:
		return nil
	}
	return fmt.Errorf("%s still exists", name)
}

// assertClean fails if the claim's pod carries the planted env var or
// mounts the service-account token.
func (w *world) assertClean(claimName string, sb *sandboxv1beta1.Sandbox) {
	w.t.Helper()
	pod := w.pod(sb.Name)
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		w.t.Errorf("claim %s: pod %s mounts the service-account token", claimName, pod.Name)
	}
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == plantedEnv {
				w.t.Errorf("claim %s: pod %s carries the planted env var", claimName, pod.Name)
			}
		}
	}
}

// TestPlantedClaimSandboxNeverBound performs the owner-reference attack on
// claims (issue 16, finding 1 follow-up): while no controller has seen the
// claims yet (the manager is stopped, as after a restart or before the
// claim controller's first pass), the tenant plants Sandboxes whose
// controller reference names the claim by its UID, with an env var of its
// choice and the service-account token mounted:
//
//   - p-beta, p-alpha: served versions (v1beta1, the published v1alpha1),
//     a warm pool member's spec, tampered;
//   - p-reverted: our exact rendering, but tampered at creation and
//     reverted later (generation 2: the Pod may come from the tampered spec);
//   - p-unserved: a version nobody serves;
//   - "cold": named like a cold claim (the cold path's name check) and
//     controlled by its UID, tampered;
//   - "squat": named like another cold claim, controlled by its UID
//     through a version nobody serves.
//
// When the controllers start, the warm claim must be Ready on a genuine
// Sandbox, the cold claim on a fresh Sandbox of its own name, and neither
// pod may carry the planted env var or token. Impostors controlled by the
// claim's UID through a served version are deleted (the claim controls
// them by their own declaration); the unserved ones are left alone and
// "squat" is a name clash like any foreign Sandbox. The warm claim gets one
// ForeignSandbox Warning per refused Sandbox, and no more on later passes.
func TestPlantedClaimSandboxNeverBound(t *testing.T) {
	testenv.SkipShort(t)
	// The real garbage collector removes the deleted impostors' Pods, so
	// the claim's own Sandbox of the same name can get its Pod.
	gc, err := env().StartGarbageCollector()
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Stop()
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	w.readyPool("empty", 0, nil)
	members, err := exttest.PoolMembers(w.c, w.ns, "pool")
	if err != nil || len(members) != 1 {
		t.Fatalf("members: %v %v", members, err)
	}
	genuine := &members[0]
	w.mgr.Stop()

	warm := w.claim("warm", "pool", nil)
	cold := w.claim("cold", "empty", nil)
	squat := w.claim("squat", "empty", nil)
	group := extv1beta1.GroupVersion.Group
	bad := map[types.UID]string{}
	for _, p := range []*sandboxv1beta1.Sandbox{
		plantForClaim(w, "p-beta", warm, group+"/v1beta1", genuine, tamperSpec),
		plantForClaim(w, "p-alpha", warm, group+"/v1alpha1", genuine, tamperSpec),
		plantForClaim(w, "p-unserved", warm, group+"/v0nonexistent", genuine, tamperSpec),
		plantForClaim(w, "cold", cold, group+"/v1beta1", genuine, tamperSpec),
		plantForClaim(w, "squat", squat, group+"/v0nonexistent", genuine, tamperSpec),
	} {
		bad[p.UID] = p.Name
	}
	reverted := plantForClaim(w, "p-reverted", warm, group+"/v1beta1", genuine, tamperSpec)
	genuine.Spec.DeepCopyInto(&reverted.Spec)
	if err := w.c.Update(context.Background(), reverted); err != nil {
		t.Fatal(err)
	}
	if reverted.Generation != 2 {
		t.Fatalf("reverted plant has generation %d, want 2", reverted.Generation)
	}
	bad[reverted.UID] = reverted.Name

	newWorldOn(w)

	for _, name := range []string{"warm", "cold"} {
		sb := w.waitReady(name)
		if n, isBad := bad[sb.UID]; isBad {
			t.Errorf("claim %s is bound to the planted sandbox %s", name, n)
			continue
		}
		w.assertClean(name, sb)
	}
	if sb := w.mustSandbox(w.getClaim("cold").Status.SandboxStatus.Name); sb.Name != "cold" {
		t.Errorf("cold claim bound to %q, want a fresh Sandbox named after it", sb.Name)
	}
	w.waitReason("squat", extv1beta1.ClaimReasonReconcilerError,
		`Error seen: sandbox "squat" is not controlled by claim "squat". Please use a different claim name or delete the sandbox manually`)

	for uid, name := range bad {
		switch name {
		case "p-unserved", "squat":
			// Not provably the claim's: never touched.
			if sb, err := w.sandbox(name); err != nil || sb.UID != uid || sb.DeletionTimestamp != nil {
				t.Errorf("%s was deleted or replaced (%v); a Sandbox no served claim controls is not the claim's to delete", name, err)
			}
		default:
			exttest.Eventually(t, wait, func() error { return w.gone(name, uid) })
		}
	}
	// One event per refused Sandbox: p-beta, p-alpha, p-reverted, p-unserved.
	exttest.Eventually(t, wait, func() error {
		if n, err := occurrences(w, "warm", claim.ReasonForeignSandbox); err != nil || n != 4 {
			return fmt.Errorf("%d %s events on the warm claim (%v), want 4", n, claim.ReasonForeignSandbox, err)
		}
		if n, err := occurrences(w, "cold", claim.ReasonForeignSandbox); err != nil || n != 1 {
			return fmt.Errorf("%d %s events on the cold claim (%v), want 1", n, claim.ReasonForeignSandbox, err)
		}
		return nil
	})
	// Later passes (forced by metadata edits) neither bind a planted
	// Sandbox nor repeat the events.
	for i := 0; i < 3; i++ {
		if err := w.c.Patch(context.Background(), w.getClaim("warm"), rawPatch(fmt.Sprintf(`{"metadata":{"labels":{"poke":"%d"}}}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	exttest.Consistently(t, 2*time.Second, func() error {
		if n, err := occurrences(w, "warm", claim.ReasonForeignSandbox); err != nil || n != 4 {
			return fmt.Errorf("%d %s events after more passes (%v), want still 4", n, claim.ReasonForeignSandbox, err)
		}
		c := w.getClaim("warm")
		if sb, err := w.sandbox(c.Status.SandboxStatus.Name); err != nil || bad[sb.UID] != "" {
			return fmt.Errorf("warm claim now bound to %q (%v)", c.Status.SandboxStatus.Name, err)
		}
		return nil
	})
}

// TestLostStatusWriteStillBinds is the crash the owner index exists for:
// the controller made the claim's Sandbox (a warm adoption patch, a cold
// create) but its status write was lost. After a restart, with its memory
// gone, the claim must find and bind exactly that Sandbox, neither refuse
// nor delete it, nor take a second one.
func TestLostStatusWriteStillBinds(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	w.readyPool("empty", 0, func(tmpl *extv1beta1.SandboxTemplate) {
		tmpl.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	})
	members, err := exttest.PoolMembers(w.c, w.ns, "pool")
	if err != nil || len(members) != 1 {
		t.Fatalf("members: %v %v", members, err)
	}
	genuine := &members[0]

	// Cold: bound, then the status is wiped as if never written.
	w.claim("cold", "empty", func(c *extv1beta1.SandboxClaim) {
		c.Spec.Env = []extv1beta1.EnvVar{{Name: "GREETING", Value: "hello"}}
		c.Spec.AdditionalPodMetadata.Labels = map[string]string{"sandbox.users.io/team": "a"}
	})
	coldSB := w.waitReady("cold")
	w.mgr.Stop()
	if err := w.c.Status().Patch(context.Background(), w.getClaim("cold"), rawPatch(`{"status":{"sandbox":null,"conditions":null}}`)); err != nil {
		t.Fatal(err)
	}

	// Warm: the adoption patch went through, the status write did not.
	warm := w.claim("warm", "pool", nil)
	adoption := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"ownerReferences":[{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","name":"warm","uid":%q,"controller":true,"blockOwnerDeletion":true}],`+
		`"labels":{%q:null,%q:null,%q:null,%q:"warm",%q:%q},"annotations":{%q:%q}}}`,
		genuine.ResourceVersion, warm.UID,
		labels.WarmPoolSandbox, labels.SandboxPodTemplateHash, labels.SandboxTemplateHash, labels.LaunchType, labels.ClaimUID, warm.UID,
		labels.PodName, genuine.Name)
	if err := w.c.Patch(context.Background(), genuine.DeepCopy(), rawPatch(adoption)); err != nil {
		t.Fatal(err)
	}

	newWorldOn(w)
	for name, want := range map[string]*sandboxv1beta1.Sandbox{"cold": coldSB, "warm": genuine} {
		sb := w.waitReady(name)
		if sb.UID != want.UID {
			t.Errorf("claim %s bound to %s (%s), want its own %s (%s)", name, sb.Name, sb.UID, want.Name, want.UID)
		}
		if sb.DeletionTimestamp != nil {
			t.Errorf("claim %s: its own Sandbox is being deleted", name)
		}
		if n, err := occurrences(w, name, claim.ReasonForeignSandbox); err != nil || n != 0 {
			t.Errorf("claim %s: %d %s events (%v); its own Sandbox was refused", name, n, claim.ReasonForeignSandbox, err)
		}
	}
	for _, sb := range w.sandboxes() {
		if sb.Labels[labels.ClaimUID] == string(warm.UID) && sb.UID != genuine.UID {
			t.Errorf("the warm claim got a second Sandbox %s", sb.Name)
		}
	}
}

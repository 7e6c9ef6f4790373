package claim_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// allowEnv is a plain template that allows claim env: no delivery key
// anywhere, as a user writes it.
func allowEnv(tm *extv1beta1.SandboxTemplate) {
	tm.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
}

func keyEnvOf(c *corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		if e.Name == latebind.KeyEnv {
			out = append(out, e.Value)
		}
	}
	return out
}

// Out of the box: a template that only allows env (no key in it) gets late
// binding, because the pool injects the controller's public key into the
// first container of its members. The env claim is served warm and its
// first command sees the env.
func TestLateBindingOutOfTheBox(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 1, allowEnv)
	ms, err := exttest.PoolMembers(w.c, w.ns, "pool")
	if err != nil || len(ms) != 1 {
		t.Fatalf("members %v: %v", ms, err)
	}
	if got := keyEnvOf(&ms[0].Spec.PodTemplate.Spec.Containers[0]); len(got) != 1 || got[0] != w.signer.PublicKey() {
		t.Fatalf("member's %s = %v, want exactly the controller's key", latebind.KeyEnv, got)
	}
	var tmpl extv1beta1.SandboxTemplate
	if err := w.c.Get(context.Background(), objKey(w.ns, "pool-tmpl"), &tmpl); err != nil {
		t.Fatal(err)
	}
	if len(keyEnvOf(&tmpl.Spec.PodTemplate.Spec.Containers[0])) != 0 {
		t.Fatal("the template itself was edited")
	}
	c := w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "k-oob", "MODE", "warm") })
	sb := w.waitReady("c1")
	if sb.Name == "c1" || sb.UID != ms[0].UID || sb.Labels[labels.ClaimUID] != string(c.UID) {
		t.Fatalf("env claim got %s, want the warm member %s", sb.Name, ms[0].Name)
	}
	if got := w.run(sb, "sh -c 'echo $API_KEY/$MODE'"); got != "k-oob/warm\n" {
		t.Fatalf("first command saw %q", got)
	}
}

// The poisoning attack with a key: a tenant plants a Sandbox that copies a
// genuine member (labels, spec, the pool's UID in its owner reference) but
// carries a key of its own, so that its sandboxd would take "env" from the
// tenant, or the Sandbox a victim adopts would be one the tenant can
// configure. Vetting accepts exactly the injected key: the pool deletes
// the planted Sandbox and no claim adopts it.
func TestLateBindingPlantedKeyRefused(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 1, allowEnv)
	var pool extv1beta1.SandboxWarmPool
	if err := w.c.Get(context.Background(), objKey(w.ns, "pool"), &pool); err != nil {
		t.Fatal(err)
	}
	ms, err := exttest.PoolMembers(w.c, w.ns, "pool")
	if err != nil || len(ms) != 1 {
		t.Fatalf("members %v: %v", ms, err)
	}
	genuine := &ms[0]
	tenant, _ := latebind.GenerateSigner()
	planted := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "planted", Labels: map[string]string{}}}
	for k, v := range genuine.Labels {
		planted.Labels[k] = v
	}
	planted.OwnerReferences = []metav1.OwnerReference{{APIVersion: extv1beta1.GroupVersion.String(), Kind: "SandboxWarmPool",
		Name: "pool", UID: pool.UID, Controller: ptr.To(true)}}
	genuine.Spec.DeepCopyInto(&planted.Spec)
	env := planted.Spec.PodTemplate.Spec.Containers[0].Env
	for i := range env {
		if env[i].Name == latebind.KeyEnv {
			env[i].Value = tenant.PublicKey()
		}
	}
	exttest.Create(t, w.c, planted)

	w.claim("victim", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "victim-secret") })
	sb := w.waitReady("victim")
	if sb.UID == planted.UID {
		t.Fatal("the victim adopted the planted Sandbox")
	}
	if got := keyEnvOf(&w.mustSandbox(sb.Name).Spec.PodTemplate.Spec.Containers[0]); sb.Name != "victim" && (len(got) != 1 || got[0] != w.signer.PublicKey()) {
		t.Fatalf("the victim's warm sandbox trusts %v", got)
	}
	exttest.Eventually(t, wait, func() error {
		switch _, err := w.sandbox("planted"); {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return errors.New("the planted Sandbox is still there")
	})
}

// sandboxdPID finds the sandboxd this test's process kubelet started for
// ip (by its --listen-host argument: our own child, never by name).
func sandboxdPID(t *testing.T, bin, ip string) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 1 && args[0] == bin && args[1] == "--listen-host="+ip {
			var pid int
			if _, err := fmt.Sscanf(filepath.Base(d), "%d", &pid); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no sandboxd process for %s", ip)
	return 0
}

// sandboxd keeps late-bound env in memory only. When it restarts (its
// container crashed), the Sandbox is not Ready until it serves again, and
// the controller delivers again on the Ready transition, so commands run
// after the restart see the env again (applied once by the new daemon).
func TestLateBindingSandboxdRestartRedelivers(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 1, allowEnv)
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "again") })
	sb := w.waitReady("c1")
	if sb.Name == "c1" {
		t.Fatal("went cold")
	}
	if got := w.run(sb, "printenv API_KEY"); got != "again\n" {
		t.Fatalf("API_KEY = %q before the restart", got)
	}
	before := meta.FindStatusCondition(w.mustSandbox(sb.Name).Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
	pid := sandboxdPID(t, sandboxd(t), sb.Status.PodIPs[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The crash is seen: the Sandbox turns Ready again with a later
	// transition, and the claim with it.
	exttest.Eventually(t, wait, func() error {
		now := meta.FindStatusCondition(w.mustSandbox(sb.Name).Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
		if now == nil || now.Status != metav1.ConditionTrue || !now.LastTransitionTime.After(before.LastTransitionTime.Time) {
			return fmt.Errorf("sandbox Ready %+v, not yet back after the restart", now)
		}
		return nil
	})
	got := w.waitReady("c1")
	if got.UID != sb.UID {
		t.Fatalf("claim moved to %s", got.Name)
	}
	if pid2 := sandboxdPID(t, sandboxd(t), sb.Status.PodIPs[0]); pid2 == pid {
		t.Fatal("sandboxd was not restarted; the test proves nothing")
	}
	exttest.Eventually(t, wait, func() error {
		if out := w.run(got, "printenv API_KEY"); out != "again\n" {
			return fmt.Errorf("after the restart API_KEY = %q (state %+v); the env was not delivered again", out, w.lateState(got))
		}
		return nil
	})
	if st := w.lateState(got); st.Applies != 1 || st.ClaimUID != string(w.getClaim("c1").UID) {
		t.Fatalf("restarted sandboxd state %+v, want one apply for the claim", st)
	}
}

func objKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

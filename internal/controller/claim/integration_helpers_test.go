package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest/harness"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env = claim.SharedEnv

const wait = 30 * time.Second

// world is one test's running system: Sandbox controller, extension
// controllers and kubelet against the shared apiserver, and a namespace.
type world struct {
	t      testing.TB
	c      client.Client
	ns     string
	writes *exttest.WriteCounter
	gate   *exttest.ReadyGate
	mgr    *harness.Manager
}

func newWorld(t *testing.T, opts extensions.Options) *world {
	t.Helper()
	testenv.SkipShort(t)
	return newWorldWith(t, harness.ManagerOptions{Extensions: opts})
}

// newWorldWith is newWorld with the manager configured by opts (its write
// counter is the world's).
func newWorldWith(t *testing.T, opts harness.ManagerOptions) *world {
	t.Helper()
	testenv.SkipShort(t)
	w := &world{t: t, c: env().Client, writes: &exttest.WriteCounter{}, gate: &exttest.ReadyGate{}}
	exttest.StartKubelet(t, env(), w.gate.Ready, nil)
	opts.Writes = w.writes
	w.mgr = harness.StartManager(t, env(), opts)
	w.ns = exttest.Namespace(t, w.c, "claim")
	return w
}

func defaults() extensions.Options { return extensions.Options{EnableWarmPoolEviction: true} }

// readyPool creates a template (edited by tmplEdit) and a pool of n and
// waits until all n are Ready.
func (w *world) readyPool(pool string, n int32, tmplEdit func(*extv1beta1.SandboxTemplate)) *extv1beta1.SandboxTemplate {
	w.t.Helper()
	tmpl := exttest.NewTemplate(w.ns, pool+"-tmpl")
	if tmplEdit != nil {
		tmplEdit(tmpl)
	}
	exttest.Create(w.t, w.c, tmpl, exttest.NewPool(w.ns, pool, tmpl.Name, n))
	exttest.Eventually(w.t, wait, func() error { return exttest.PoolReady(w.c, w.ns, pool, n) })
	return tmpl
}

func (w *world) claim(name, pool string, edit func(*extv1beta1.SandboxClaim)) *extv1beta1.SandboxClaim {
	w.t.Helper()
	c := exttest.NewClaim(w.ns, name, pool)
	if edit != nil {
		edit(c)
	}
	exttest.Create(w.t, w.c, c)
	return c
}

func (w *world) getClaim(name string) *extv1beta1.SandboxClaim {
	w.t.Helper()
	var c extv1beta1.SandboxClaim
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &c); err != nil {
		w.t.Fatal(err)
	}
	return &c
}

func (w *world) sandbox(name string) (*sandboxv1beta1.Sandbox, error) {
	var sb sandboxv1beta1.Sandbox
	err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &sb)
	return &sb, err
}

func (w *world) mustSandbox(name string) *sandboxv1beta1.Sandbox {
	w.t.Helper()
	sb, err := w.sandbox(name)
	if err != nil {
		w.t.Fatal(err)
	}
	return sb
}

func (w *world) pod(name string) *corev1.Pod {
	w.t.Helper()
	var p corev1.Pod
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &p); err != nil {
		w.t.Fatal(err)
	}
	return &p
}

// waitReady waits until the claim is Ready and returns its Sandbox.
func (w *world) waitReady(claim string) *sandboxv1beta1.Sandbox {
	w.t.Helper()
	exttest.Eventually(w.t, wait, func() error { return exttest.ClaimReady(w.c, w.ns, claim) })
	return w.mustSandbox(w.getClaim(claim).Status.SandboxStatus.Name)
}

// waitReason waits until the claim's Ready condition has reason (and, if
// not empty, exactly message).
func (w *world) waitReason(claim, reason, message string) {
	w.t.Helper()
	exttest.Eventually(w.t, wait, func() error {
		r, m, err := exttest.ClaimReason(w.c, w.ns, claim)
		if err != nil {
			return err
		}
		if r != reason || (message != "" && m != message) {
			return fmt.Errorf("claim %s: reason %q message %q; want %q %q", claim, r, m, reason, message)
		}
		return nil
	})
}

func (w *world) sandboxes() []sandboxv1beta1.Sandbox {
	w.t.Helper()
	var list sandboxv1beta1.SandboxList
	if err := w.c.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
		w.t.Fatal(err)
	}
	return list.Items
}

func readyCond(sb *sandboxv1beta1.Sandbox) bool {
	return meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
}

// newWorldOn restarts w's manager with fresh in-memory state.
func newWorldOn(w *world) {
	w.mgr = harness.StartManager(w.t, env(), harness.ManagerOptions{Writes: w.writes, Extensions: defaults()})
}

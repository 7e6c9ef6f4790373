package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/devstack"
)

// standaloneSandbox creates a Sandbox with the stack template's Pod, owned
// by nobody, and deletes it when the test ends.
func standaloneSandbox(t *testing.T, st *devstack.Stack, name string) {
	t.Helper()
	var tmpl extv1beta1.SandboxTemplate
	if err := st.Client.Get(testCtx(t), types.NamespacedName{Namespace: st.Namespace, Name: st.Template}, &tmpl); err != nil {
		t.Fatal(err)
	}
	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: name},
		Spec:       sandboxv1beta1.SandboxSpec{SandboxBlueprint: *tmpl.Spec.SandboxBlueprint.DeepCopy()},
	}
	if err := st.Client.Create(testCtx(t), sb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Client.Delete(context.Background(), sb) })
}

// TestIntegrationAttachClaimlessSandbox: a Sandbox created directly (no
// claim) is reached by name, through the router, once it is Ready; Close
// leaves it running, and Open re-attaches. Claimed Sandboxes, pool
// members and unknown names are refused.
func TestIntegrationAttachClaimlessSandbox(t *testing.T) {
	st := sharedStack(t)
	cl, err := NewClient(testCtx(t), stackOptions(st))
	if err != nil {
		t.Fatal(err)
	}
	// Attached right after creation: Attach waits for Ready.
	standaloneSandbox(t, st, "standalone-1")
	s, err := cl.AttachSandbox(testCtx(t), "standalone-1", st.Namespace)
	if err != nil {
		t.Fatalf("AttachSandbox: %v", err)
	}
	if s.ClaimName() != "" || s.SandboxName() != "standalone-1" || s.PodIP() == "" || !s.IsReady() {
		t.Errorf("handle: claim %q sandbox %q ip %q ready %v", s.ClaimName(), s.SandboxName(), s.PodIP(), s.IsReady())
	}
	exerciseLegacy(t, s)
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if s.IsReady() {
		t.Error("ready after Close")
	}
	var sb sandboxv1beta1.Sandbox
	if err := st.Client.Get(testCtx(t), types.NamespacedName{Namespace: st.Namespace, Name: "standalone-1"}, &sb); err != nil || sb.DeletionTimestamp != nil {
		t.Fatalf("Close touched a Sandbox it does not own: %v", err)
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("re-attach: %v", err)
	}
	if res, err := s.Run(testCtx(t), "echo again"); err != nil || res.Stdout != "again\n" {
		t.Errorf("Run after re-attach = %+v, %v", res, err)
	}
	_ = s.Close(testCtx(t))

	if _, err := cl.AttachSandbox(testCtx(t), "no-such-sandbox", st.Namespace); !errors.Is(err, ErrNotFound) {
		t.Errorf("attach to a missing sandbox = %v, want ErrNotFound", err)
	}
	claimed := openFromPool(t, stackOptions(st))
	if _, err := cl.AttachSandbox(testCtx(t), claimed.SandboxName(), st.Namespace); err == nil ||
		!strings.Contains(err.Error(), "belongs to claim "+claimed.ClaimName()) {
		t.Errorf("attach to a claimed sandbox = %v", err)
	}
	var members sandboxv1beta1.SandboxList
	if err := st.Client.List(testCtx(t), &members, client.InNamespace(st.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Items {
		if ref := metav1.GetControllerOf(&m); ref != nil && ref.Kind == "SandboxWarmPool" {
			if _, err := cl.AttachSandbox(testCtx(t), m.Name, st.Namespace); err == nil || !strings.Contains(err.Error(), "warm pool") {
				t.Errorf("attach to pool member %s = %v", m.Name, err)
			}
			break
		}
	}
}

// TestIntegrationRouterNamespace: the router tunnel looks in
// RouterNamespace when set, else in the sandbox's namespace, then in
// agent-sandbox-system (the stack publishes the router in both).
func TestIntegrationRouterNamespace(t *testing.T) {
	st := sharedStack(t)
	for _, tc := range []struct{ option, want string }{
		{"", st.Namespace},
		{DefaultRouterNamespace, DefaultRouterNamespace},
	} {
		o := stackOptions(st)
		o.RouterNamespace = tc.option
		s := openFromPool(t, o)
		s.mu.Lock()
		got := s.conn.strategy.(*routerTunnelStrategy).namespace
		s.mu.Unlock()
		if got != tc.want {
			t.Errorf("RouterNamespace %q: tunnel to the router in %q, want %q", tc.option, got, tc.want)
		}
		if res, err := s.Run(testCtx(t), "echo through "+got); err != nil || res.Stdout != "through "+got+"\n" {
			t.Errorf("Run = %+v, %v", res, err)
		}
		closeAndCheckGone(t, st, s)
	}
}

// TestIntegrationClaimWithSandboxNotReady: a claim whose Sandbox is not
// Ready (suspended here) cannot be attached; the error says so and what to
// do, and still matches ErrOrphanedClaim as the published SDK's does.
func TestIntegrationClaimWithSandboxNotReady(t *testing.T) {
	st := sharedStack(t)
	s := openFromPool(t, stackOptions(st))
	claim, name := s.ClaimName(), s.SandboxName()
	if err := s.Disconnect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"operatingMode":"Suspended"}}`)
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: name}}
	if err := st.Client.Patch(testCtx(t), sb, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sandbox not Ready", func() bool {
		var cur sandboxv1beta1.Sandbox
		if err := st.Client.Get(context.Background(), types.NamespacedName{Namespace: st.Namespace, Name: name}, &cur); err != nil {
			return false
		}
		for _, c := range cur.Status.Conditions {
			if c.Type == "Ready" {
				return c.Status != metav1.ConditionTrue
			}
		}
		return false
	})
	want := "claim " + st.Namespace + "/" + claim + " is bound to sandbox " + name + ", which is not Ready ("
	err := s.Open(testCtx(t))
	if !errors.Is(err, ErrOrphanedClaim) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Open again once it is, or Close to delete the claim") {
		t.Errorf("Open = %v", err)
	}
	other, err := NewClient(testCtx(t), stackOptions(st))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetSandbox(testCtx(t), claim, st.Namespace); !errors.Is(err, ErrOrphanedClaim) || !strings.Contains(err.Error(), want) {
		t.Errorf("GetSandbox = %v", err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestIntegrationRouterTunnelShared: the handles of one client share one
// port-forward tunnel to the router and its HTTP connections; closing them
// leaves the tunnel for the next handle.
func TestIntegrationRouterTunnelShared(t *testing.T) {
	st := sharedStack(t)
	cl, err := NewClient(testCtx(t), stackOptions(st))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.DeleteAll(context.Background()) })
	tunnelOf := func(s *Sandbox) *tunnel {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.conn.strategy.(*routerTunnelStrategy).t
	}
	a, err := cl.CreateSandbox(testCtx(t), st.WarmPool, st.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.CreateSandbox(testCtx(t), st.WarmPool, st.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	tun := tunnelOf(a)
	if tunnelOf(b) != tun {
		t.Fatal("two handles of one client opened two tunnels")
	}
	for _, s := range []*Sandbox{a, b} {
		if res, err := s.Run(testCtx(t), "echo "+s.SandboxName()); err != nil || res.Stdout != s.SandboxName()+"\n" {
			t.Errorf("Run in %s = %+v, %v", s.SandboxName(), res, err)
		}
	}
	closeAndCheckGone(t, st, a)
	if res, err := b.Run(testCtx(t), "echo still"); err != nil || res.Stdout != "still\n" {
		t.Errorf("Run after the other handle closed = %+v, %v", res, err)
	}
	closeAndCheckGone(t, st, b)
	select {
	case <-tun.Done():
		t.Fatal("the tunnel closed with its last handle")
	default:
	}
	if err := st.WaitWarmPoolReady(testCtx(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	c, err := cl.CreateSandbox(testCtx(t), st.WarmPool, st.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if tunnelOf(c) != tun {
		t.Error("a new handle did not reuse the idle tunnel")
	}
	if res, err := c.Run(testCtx(t), "echo reused"); err != nil || res.Stdout != "reused\n" {
		t.Errorf("Run through the reused tunnel = %+v, %v", res, err)
	}
	closeAndCheckGone(t, st, c)
}

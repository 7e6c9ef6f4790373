package manager

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// A container restarted in the same Pod holds the Lease under the same
// identity, so it leads again while its predecessor's lease is still
// valid: no leader transition, and the lease released on shutdown. The
// planted lease is valid for an hour, so any other identity (the
// controller-runtime default, "<hostname>_<random UUID>") would never be
// elected within the test's timeout.
func TestRestartedContainerLeadsAgainAtOnce(t *testing.T) {
	testenv.SkipShort(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "leader-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	const identity = "agent-sandbox-controller-7d9f-abcde_0f3c2a54-1111-4c1e-9a55-3f2b8e0c9d11"
	acquired := metav1.NewMicroTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(identity),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &acquired,
			RenewTime:            ptr.To(metav1.NewMicroTime(time.Now())),
			LeaseTransitions:     ptr.To[int32](4),
		},
	}
	if err := env.Client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}

	mgr, err := New(env.Config, Options{
		MetricsBindAddress:      "0",
		HealthProbeBindAddress:  "0",
		LeaderElect:             true,
		LeaderElectionNamespace: ns.Name,
		LeaderElectionIdentity:  identity,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("manager stopped before it was elected: %v", err)
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("not elected within 30s although the valid lease is held under its own identity")
	}

	got := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), got); err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != identity {
		t.Errorf("holder = %q, want %q", h, identity)
	}
	if tr := ptr.Deref(got.Spec.LeaseTransitions, 0); tr != 4 {
		t.Errorf("leaseTransitions = %d, want 4: taking back its own lease is no transition", tr)
	}
	if got.Spec.AcquireTime == nil || !got.Spec.AcquireTime.Equal(&acquired) {
		t.Errorf("acquireTime = %v, want the predecessor's %v", got.Spec.AcquireTime, acquired)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("manager: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop within 30s")
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), got); err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("holder after shutdown = %q, want the lease released", h)
	}
}

func TestValidateLeaderIdentity(t *testing.T) {
	for id, wantErr := range map[string]bool{
		"":                     false,
		"pod-7d9f_0f3c2a54":    false,
		"$(POD_NAME)_0f3c2a54": true,
		"pod-7d9f_$(POD_UID)":  true,
	} {
		if err := ValidateLeaderIdentity(id); (err != nil) != wantErr {
			t.Errorf("ValidateLeaderIdentity(%q) = %v, want error %v", id, err, wantErr)
		}
	}
}

// Without --leader-election-namespace the Lease goes to the Pod's own
// namespace; outside a Pod that is an error naming the flag.
func TestLeaderLockNamespace(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"} // never contacted
	dir := t.TempDir()
	old := inClusterNamespaceFile
	t.Cleanup(func() { inClusterNamespaceFile = old })

	inClusterNamespaceFile = filepath.Join(dir, "missing")
	if _, err := newLeaderLock(cfg, scheme, "", "p_u"); err == nil || !strings.Contains(err.Error(), "--leader-election-namespace") {
		t.Errorf("outside a Pod: err = %v, want one naming --leader-election-namespace", err)
	}

	inClusterNamespaceFile = filepath.Join(dir, "namespace")
	if err := os.WriteFile(inClusterNamespaceFile, []byte("agents-ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lock, err := newLeaderLock(cfg, scheme, "", "p_u")
	if err != nil {
		t.Fatal(err)
	}
	if d := lock.Describe(); d != "agents-ops/"+LeaderElectionID {
		t.Errorf("lock = %s, want agents-ops/%s", d, LeaderElectionID)
	}
	if id := lock.Identity(); id != "p_u" {
		t.Errorf("identity = %q, want p_u", id)
	}
	if _, err := newLeaderLock(cfg, scheme, "ns", "$(POD_NAME)_u"); err == nil {
		t.Error("unexpanded identity accepted")
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// The controller's managed late-binding key, with exactly the shipped RBAC
// (k8s/controller/late_binding_rbac.yaml) as the controller's service
// account: replicas starting together agree on one key, a restart reads
// the same key, a key file overrides, an invalid Secret is an error and is
// left alone; and the controller can read no other Secret, list none and
// never rewrite its key.
func TestManagedLateBindingKey(t *testing.T) {
	testenv.SkipShort(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "agent-sandbox-system"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "k8s", "controller", "late_binding_rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	role, rb := &rbacv1.Role{}, &rbacv1.RoleBinding{}
	if len(docs) != 2 || yaml.Unmarshal([]byte(docs[0]), role) != nil || yaml.Unmarshal([]byte(docs[1]), rb) != nil {
		t.Fatalf("late_binding_rbac.yaml: want a Role and a RoleBinding")
	}
	for _, o := range []client.Object{role, rb} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}, Data: map[string][]byte{"k": []byte("v")}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":agent-sandbox-controller"}
	sa, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC applies once the binding reached the authorizer's cache.
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := sa.Get(ctx, client.ObjectKey{Namespace: ns, Name: latebind.DefaultKeySecret}, &corev1.Secret{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the role never took effect")
	}
	f := &flags{manageLateBindingKey: true}
	f.webhook.Namespace = ns

	// Four replicas start at once.
	keys := make([]string, 4)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			s, err := lateBindingSigner(ctx, cfg, f)
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
				return
			}
			keys[i] = s.PublicKey()
		})
	}
	wg.Wait()
	for i := range keys {
		if keys[i] == "" || keys[i] != keys[0] {
			t.Fatalf("replicas disagree on the key: %v", keys)
		}
	}
	var s corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: latebind.DefaultKeySecret}, &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data[latebind.SecretPublicKey]) != keys[0] || s.Immutable == nil || !*s.Immutable {
		t.Fatalf("secret public key %q immutable %v, want %q and immutable", s.Data[latebind.SecretPublicKey], s.Immutable, keys[0])
	}
	// A restart reads the same key.
	again, err := lateBindingSigner(ctx, cfg, f)
	if err != nil || again.PublicKey() != keys[0] {
		t.Fatalf("after a restart: %v, %v", again, err)
	}
	// A key file wins, and nothing is read from the cluster.
	file, _ := latebind.GenerateSigner()
	pemKey, _ := file.EncodePrivateKey()
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := lateBindingSigner(ctx, &rest.Config{Host: "https://127.0.0.1:1"}, &flags{manageLateBindingKey: true, lateBindingKeyFile: path}); err != nil || got.PublicKey() != file.PublicKey() {
		t.Fatalf("key file: %v, %v", got, err)
	}
	if got, err := lateBindingSigner(ctx, cfg, &flags{}); err != nil || got != nil {
		t.Fatalf("--manage-late-binding-key=false: %v, %v, want late binding off", got, err)
	}
	// What a compromised controller can do with these rights.
	if err := sa.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("get another Secret: %v, want forbidden", err)
	}
	if err := sa.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Errorf("list Secrets: %v, want forbidden", err)
	}
	s.Data[latebind.SecretPrivateKey] = []byte("x")
	if err := sa.Update(ctx, &s); !apierrors.IsForbidden(err) {
		t.Errorf("update the key Secret: %v, want forbidden", err)
	}
	if err := sa.Delete(ctx, &s); !apierrors.IsForbidden(err) {
		t.Errorf("delete the key Secret: %v, want forbidden", err)
	}

	// An invalid key Secret is an error, and is not overwritten.
	f2 := &flags{manageLateBindingKey: true}
	f2.webhook.Namespace = "broken"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "broken"}}); err != nil {
		t.Fatal(err)
	}
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "broken", Name: latebind.DefaultKeySecret}, Data: map[string][]byte{latebind.SecretPrivateKey: []byte("not a key")}}
	if err := env.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if got, err := lateBindingSigner(ctx, env.Config, f2); err == nil || !strings.Contains(err.Error(), "--manage-late-binding-key=false") {
		t.Fatalf("invalid Secret: %v, %v; want an error naming the way out", got, err)
	}
	var after corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bad), &after); err != nil || string(after.Data[latebind.SecretPrivateKey]) != "not a key" {
		t.Fatalf("the invalid Secret was touched: %v %q", err, after.Data[latebind.SecretPrivateKey])
	}
}

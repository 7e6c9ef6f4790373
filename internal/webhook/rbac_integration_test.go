package webhook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// applyManifest creates every object of a YAML file (typed: RBAC only).
func applyManifest(t *testing.T, path string, obj func(kind string) client.Object) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil || tm.Kind == "" {
			continue
		}
		o := obj(tm.Kind)
		if err := yaml.Unmarshal([]byte(doc), o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := k8s.Create(testCtx(t), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s %s: %v", tm.Kind, o.GetName(), err)
		}
	}
}

// TestControllerRBACLimitsSecrets performs the attack of a compromised
// controller: with exactly the shipped RBAC (k8s/controller/webhook_rbac.yaml
// and the generated ClusterRole), it manages its own certificate Secret but
// can read no other Secret, list none, and patch no CRD but its four.
func TestControllerRBACLimitsSecrets(t *testing.T) {
	testenv.SkipShort(t)
	const ns = "agent-sandbox-system"
	ctx := testCtx(t)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	root := testenv.RepoRoot()
	newRBAC := func(kind string) client.Object {
		u := map[string]func() client.Object{
			"Role":               func() client.Object { return &rbacRole{} },
			"RoleBinding":        func() client.Object { return &rbacRoleBinding{} },
			"ClusterRole":        func() client.Object { return &rbacClusterRole{} },
			"ClusterRoleBinding": func() client.Object { return &rbacClusterRoleBinding{} },
		}[kind]
		if u == nil {
			t.Fatalf("unexpected kind %s", kind)
		}
		return u()
	}
	applyManifest(t, filepath.Join(root, "k8s", "controller", "webhook_rbac.yaml"), newRBAC)
	applyManifest(t, filepath.Join(root, "k8s", "rbac", "core", "role.yaml"), newRBAC)
	applyManifest(t, filepath.Join(root, "k8s", "controller", "role_binding.yaml"), newRBAC)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}, StringData: map[string]string{"k": "v"}}
	if err := k8s.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":agent-sandbox-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	c, err := client.New(sa, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC is eventually consistent with the bindings just created: retry
	// the legitimate path until it is allowed.
	m := &CertManager{Client: c, Namespace: ns, CertDir: t.TempDir(), CRDNames: []string{}}
	var ensureErr error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		ensureErr = m.Ensure(ctx)
		return ensureErr == nil || !apierrors.IsForbidden(ensureErr), nil
	})
	if ensureErr != nil {
		t.Fatalf("the controller cannot manage its own Secret: %v", ensureErr)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "someone-elses"}, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("reading another Secret: err = %v, want Forbidden", err)
	}
	if err := c.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Fatalf("listing Secrets: err = %v, want Forbidden", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: widgetCRD}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsForbidden(err) {
		t.Fatalf("reading a foreign CRD: err = %v, want Forbidden", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: CRDNames[0]}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
		t.Fatalf("reading its own CRD: %v", err)
	}
}

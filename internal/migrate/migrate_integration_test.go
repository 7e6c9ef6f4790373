package migrate

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/webhook/webhooktest"
)

var env *webhooktest.Env

// Every test here needs the apiserver with the conversion webhook: under
// -short the binary exits before starting one, and `make test-unit` does not
// build it at all.
func TestMain(m *testing.M) {
	testenv.ExitIfShort("a kube-apiserver with the conversion webhook", testenv.IntegrationTarget)
	e, err := webhooktest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	_ = e.Stop()
	os.Exit(code)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	testenv.SkipShort(t)
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// setStorage makes version the storage version of every project CRD (the
// pre-upgrade cluster stores v1alpha1) and waits until the apiserver
// reports it in storedVersions.
func setStorage(t *testing.T, version string) {
	t.Helper()
	ctx := testCtx(t)
	for _, k := range Kinds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: k.CRD}, crd); err != nil {
			t.Fatal(err)
		}
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == version
		}
		if err := env.Client.Update(ctx, crd); err != nil {
			t.Fatalf("setting storage of %s to %s: %v", k.CRD, version, err)
		}
		if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			cur := &apiextensionsv1.CustomResourceDefinition{}
			if err := env.Client.Get(ctx, types.NamespacedName{Name: k.CRD}, cur); err != nil {
				return false, err
			}
			return slices.Contains(cur.Status.StoredVersions, version), nil
		}); err != nil {
			t.Fatalf("waiting for %s storedVersions to include %s: %v", k.CRD, version, err)
		}
	}
}

// TestBootstrapAndMigrate runs the upgrade of spec §7 (the reference's
// test-migration.py) on a real apiserver: objects written as v1alpha1 while
// v1alpha1 is the storage version, bootstrap (dry run first), the upgrade
// (storage version v1beta1), migrate, and the checks on the result.
func TestBootstrapAndMigrate(t *testing.T) {
	ctx := testCtx(t)
	setStorage(t, "v1alpha1")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "mig-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	n := ns.Name
	pt := sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}

	tmpl := &extv1alpha1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-template-cold", Namespace: n}}
	tmpl.Spec.PodTemplate = pt
	pool := &extv1alpha1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: n}}
	pool.Spec.Replicas, pool.Spec.SandboxTemplateRef.Name = 1, "upgrade-template-cold"
	running := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "running", Namespace: n}}
	running.Spec.PodTemplate, running.Spec.Replicas = pt, ptr.To(int32(1))
	suspended := &sandboxv1alpha1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "suspended", Namespace: n}}
	suspended.Spec.PodTemplate, suspended.Spec.Replicas = pt, ptr.To(int32(0))
	for _, o := range []client.Object{tmpl, pool, running, suspended} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %T: %v", o, err)
		}
	}
	claims := map[string]struct{ warmpool, bound, wantRef string }{
		"cold-default": {"default", "", "shadow-pool-upgrade-template-cold"},
		"cold-none":    {"none", "", "shadow-pool-upgrade-template-cold"},
		"pinned":       {"warm", "", "warm"},
		"adopted":      {"default", "warm-x7k2p", "warm"},
	}
	for name, c := range claims {
		cl := &extv1alpha1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n}}
		cl.Spec.SandboxTemplateRef.Name, cl.Spec.WarmPool = "upgrade-template-cold", c.warmpool
		if err := env.Client.Create(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if c.bound != "" {
			cl.Status.SandboxStatus.Name = c.bound
			if err := env.Client.Status().Update(ctx, cl); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Bootstrap, dry run: reports the pool, creates nothing.
	var out bytes.Buffer
	got, err := Bootstrap(ctx, env.Client, Options{Namespace: n, DryRun: true, Out: &out})
	if err != nil {
		t.Fatalf("bootstrap dry run: %v\n%s", err, out.String())
	}
	if len(got) != 1 || got[0].Name != "shadow-pool-upgrade-template-cold" {
		t.Fatalf("dry run would create %+v, want the one shadow pool", got)
	}
	pools := &extv1alpha1.SandboxWarmPoolList{}
	if err := env.Client.List(ctx, pools, client.InNamespace(n)); err != nil || len(pools.Items) != 1 {
		t.Fatalf("after the dry run: %d pools (%v), want only the user's", len(pools.Items), err)
	}
	// Bootstrap for real, twice (idempotent).
	for i := range 2 {
		if _, err := Bootstrap(ctx, env.Client, Options{Namespace: n, Out: &out}); err != nil {
			t.Fatalf("bootstrap run %d: %v", i, err)
		}
	}
	shadow := &extv1beta1.SandboxWarmPool{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: n, Name: "shadow-pool-upgrade-template-cold"}, shadow); err != nil {
		t.Fatalf("shadow pool: %v", err)
	}
	if shadow.DesiredReplicas() != 0 || shadow.Spec.SandboxTemplateRef.Name != "upgrade-template-cold" ||
		shadow.Annotations[AnnotationShadow] != "true" || shadow.Annotations[AnnotationSourceTemplate] != "upgrade-template-cold" {
		t.Fatalf("shadow pool = %+v %v", shadow.Spec, shadow.Annotations)
	}

	// The upgrade: v1beta1 becomes the storage version.
	setStorage(t, "v1beta1")
	res, err := Migrate(ctx, env.Client, Options{Out: &out, Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }})
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out.String())
	}
	if res.Rewritten < 9 {
		t.Fatalf("rewrote %d objects, want at least the 9 of this test\n%s", res.Rewritten, out.String())
	}
	for _, k := range Kinds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: k.CRD}, crd); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(crd.Status.StoredVersions, []string{"v1beta1"}) {
			t.Fatalf("%s storedVersions = %v, want [v1beta1]", k.CRD, crd.Status.StoredVersions)
		}
	}
	again, err := Migrate(ctx, env.Client, Options{Namespace: n, Out: &out})
	if err != nil || again.Rewritten != 0 {
		t.Fatalf("second migrate rewrote %d (%v), want 0 (idempotent)", again.Rewritten, err)
	}

	for name, c := range claims {
		cl := &extv1beta1.SandboxClaim{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: n, Name: name}, cl); err != nil {
			t.Fatal(err)
		}
		if cl.Spec.WarmPoolRef.Name != c.wantRef || cl.Status.SandboxStatus.Name != c.bound {
			t.Errorf("claim %s: warmPoolRef %q bound %q, want %q %q", name, cl.Spec.WarmPoolRef.Name, cl.Status.SandboxStatus.Name, c.wantRef, c.bound)
		}
		if cl.Annotations[AnnotationMigratedAt] != "2026-01-02T03:04:05Z" {
			t.Errorf("claim %s: %s = %q", name, AnnotationMigratedAt, cl.Annotations[AnnotationMigratedAt])
		}
		back := &extv1alpha1.SandboxClaim{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: n, Name: name}, back); err != nil {
			t.Fatal(err)
		}
		if back.Spec.WarmPool != c.warmpool || back.Spec.SandboxTemplateRef.Name != "upgrade-template-cold" {
			t.Errorf("claim %s read as v1alpha1: warmpool %q template %q, want %q", name, back.Spec.WarmPool, back.Spec.SandboxTemplateRef.Name, c.warmpool)
		}
	}
	for name, want := range map[string]sandboxv1beta1.OperatingMode{"running": "Running", "suspended": "Suspended"} {
		sb := &sandboxv1beta1.Sandbox{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: n, Name: name}, sb); err != nil {
			t.Fatal(err)
		}
		if sb.Spec.OperatingMode != want {
			t.Errorf("sandbox %s: operatingMode %q, want %q", name, sb.Spec.OperatingMode, want)
		}
	}
}

package webhook

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1alpha1 "sigs.k8s.io/agent-sandbox/api/v1alpha1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

const sandboxesCRD = "sandboxes.agents.x-k8s.io"

// conversionCalls is the apiserver's count of successful conversion
// webhook calls into v1alpha1 for one CRD.
func conversionCalls(t *testing.T, ctx context.Context, crd string) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the apiserver's metrics: %v", err)
	}
	prefix := fmt.Sprintf(`apiserver_crd_conversion_webhook_duration_seconds_count{crd_name=%q,`, crd)
	var n float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, `succeeded="true"`) || !strings.Contains(line, `to_version="v1alpha1"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// relabel writes the object n times (v1beta1 label patches).
func relabel(t *testing.T, ctx context.Context, obj client.Object, n int) {
	t.Helper()
	for i := range n {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"write":"%d-%d"}}}`, time.Now().UnixNano(), i)
		if err := k8s.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("patching %s: %v", obj.GetName(), err)
		}
	}
}

func servedOf(t *testing.T, ctx context.Context, name, version string) bool {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8s.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			return v.Served
		}
	}
	t.Fatalf("CRD %s has no version %s", name, version)
	return false
}

// TestVersionSwitchStopsConversionsOnWrites: while v1alpha1 is served, every
// v1beta1 write of a Sandbox makes the apiserver call the conversion
// webhook (its v1alpha1 watch cache converts every change, with no
// v1alpha1 client anywhere: kubernetes/kubernetes#129979). Switched off,
// the same writes call it not at all, v1alpha1 requests get 404, and the
// other CRDs are untouched; switched on again, v1alpha1 reads work.
func TestVersionSwitchStopsConversionsOnWrites(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	ns := newNamespace(t)
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "writes", Namespace: ns}}
	sb.Spec.PodTemplate = podTemplate()
	if err := k8s.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	on := &VersionSwitch{Client: k8s, CRDNames: []string{sandboxesCRD}, Version: DeprecatedVersion, Served: true}
	off := &VersionSwitch{Client: k8s, CRDNames: []string{sandboxesCRD}, Version: DeprecatedVersion, Served: false}
	t.Cleanup(func() {
		if err := on.Ensure(context.Background()); err != nil {
			t.Errorf("serving v1alpha1 again: %v", err)
		}
	})

	// Served (as installed): five writes, five calls at least.
	before := conversionCalls(t, ctx, sandboxesCRD)
	relabel(t, ctx, sb, 5)
	var got float64
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		got = conversionCalls(t, ctx, sandboxesCRD) - before
		return got >= 5, nil
	}); err != nil {
		t.Fatalf("v1alpha1 served: %v conversion calls after 5 v1beta1 writes, want >= 5", got)
	}

	if err := off.Ensure(ctx); err != nil {
		t.Fatalf("switching v1alpha1 off: %v", err)
	}
	if servedOf(t, ctx, sandboxesCRD, DeprecatedVersion) || !servedOf(t, ctx, sandboxesCRD, "v1beta1") {
		t.Fatal("want v1alpha1 unserved and v1beta1 served")
	}
	if !servedOf(t, ctx, "sandboxclaims.extensions.agents.x-k8s.io", DeprecatedVersion) {
		t.Fatal("the claims' CRD was not in the switch's list but lost v1alpha1")
	}
	// The apiserver rebuilds its handler asynchronously: wait for the 404.
	var alphaErr error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		alphaErr = k8s.Get(ctx, client.ObjectKeyFromObject(sb), &sandboxv1alpha1.Sandbox{})
		return apierrors.IsNotFound(alphaErr), nil
	}); err != nil {
		t.Fatalf("v1alpha1 get after switching off = %v, want 404", alphaErr)
	}
	if err := off.Ensure(ctx); err != nil {
		t.Fatalf("switching off twice: %v", err)
	}

	// Unserved: the same writes call nothing, once the apiserver has torn
	// down the old handler's watch caches (it waits for the requests they
	// serve to drain, up to twice its request timeout). A claim (its CRD
	// still serving v1alpha1) written alongside shows the apiserver still
	// converting what it has to, so "no call" is not just "not yet".
	claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "control", Namespace: ns}}
	claim.Spec.WarmPoolRef.Name = "pool"
	if err := k8s.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	const claimsCRD = "sandboxclaims.extensions.agents.x-k8s.io"
	// sandboxCallsOfWrites writes the Sandbox and the claim n times each and
	// returns the Sandbox's conversion calls, read once the claim's have come.
	sandboxCallsOfWrites := func(ctx context.Context, n int) (float64, error) {
		claimsBefore := conversionCalls(t, ctx, claimsCRD)
		before := conversionCalls(t, ctx, sandboxesCRD)
		relabel(t, ctx, sb, n)
		relabel(t, ctx, claim, n)
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			return conversionCalls(t, ctx, claimsCRD)-claimsBefore >= float64(n), nil
		})
		return conversionCalls(t, ctx, sandboxesCRD) - before, err
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := wait.PollUntilContextCancel(drainCtx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		n, err := sandboxCallsOfWrites(ctx, 1)
		return err == nil && n == 0, nil
	}); err != nil {
		t.Fatalf("v1beta1 Sandbox writes still call the conversion webhook %s after v1alpha1 was switched off", time.Since(start).Round(time.Second))
	}
	t.Logf("the old watch caches were gone %s after the switch", time.Since(start).Round(time.Millisecond))
	n, err := sandboxCallsOfWrites(ctx, 5)
	if err != nil {
		t.Fatalf("the claims' conversions did not come: %v", err)
	}
	if n != 0 {
		t.Fatalf("v1alpha1 unserved: %v conversion calls after 5 v1beta1 writes, want 0", n)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(claim), &extv1alpha1.SandboxClaim{}); err != nil {
		t.Fatalf("v1alpha1 claim read: %v", err)
	}

	if err := on.Ensure(ctx); err != nil {
		t.Fatalf("switching v1alpha1 on: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		alphaErr = k8s.Get(ctx, client.ObjectKeyFromObject(sb), &sandboxv1alpha1.Sandbox{})
		return alphaErr == nil, nil
	}); err != nil {
		t.Fatalf("v1alpha1 get after switching on = %v", alphaErr)
	}
}

// TestVersionSwitchKeepsTheStorageVersion: unserving the storage version
// is refused and changes nothing.
func TestVersionSwitchKeepsTheStorageVersion(t *testing.T) {
	testenv.SkipShort(t)
	ctx := testCtx(t)
	s := &VersionSwitch{Client: k8s, CRDNames: []string{sandboxesCRD}, Version: "v1beta1", Served: false}
	err := s.Ensure(ctx)
	if err == nil || !strings.Contains(err.Error(), "storage version") {
		t.Fatalf("Ensure = %v, want a storage-version error", err)
	}
	if !servedOf(t, ctx, sandboxesCRD, "v1beta1") {
		t.Fatal("v1beta1 was unserved")
	}
}

package sandbox

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func TestSimpleSandboxBecomesReadyWithService(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "my-sandbox").service(true).
		podLabels("app", "demo").podAnnotations("note", "hi").
		ports(corev1.ContainerPort{Name: "http", ContainerPort: 8888}).create(t)

	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	hash := labels.NameHash(sb.Name)
	if got.Status.Service != "my-sandbox" || got.Status.ServiceFQDN != "my-sandbox."+ns+".svc.cluster.local" ||
		got.Status.LabelSelector != labels.SandboxNameHash+"="+hash {
		t.Errorf("status = %+v", got.Status)
	}
	if len(got.Status.PodIPs) != 1 || got.Status.NodeName == "" {
		t.Errorf("podIPs/nodeName not propagated: %+v", got.Status)
	}
	want := map[string][2]string{
		"Suspended":    {"False", sandboxv1beta1.ReasonNotSuspended},
		"PodScheduled": {"True", sandboxv1beta1.ReasonPodScheduled},
		"Ready":        {"True", sandboxv1beta1.ReasonDependenciesReady},
	}
	if len(got.Status.Conditions) != 3 {
		t.Errorf("want exactly 3 conditions, got %+v", got.Status.Conditions)
	}
	for _, c := range got.Status.Conditions {
		w, ok := want[c.Type]
		if !ok || string(c.Status) != w[0] || c.Reason != w[1] || c.ObservedGeneration != 1 {
			t.Errorf("condition %+v unexpected", c)
		}
	}
	if c := condition(got, "Ready"); c.Message != "Pod is Ready; Service Exists" {
		t.Errorf("Ready message = %q", c.Message)
	}

	pod, err := getPod(ns, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.APIVersion != "agents.x-k8s.io/v1beta1" || ref.Kind != "Sandbox" || ref.Name != sb.Name ||
		ref.UID != got.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("pod owner reference = %+v", pod.OwnerReferences)
	}
	if pod.Labels["app"] != "demo" || pod.Labels[labels.SandboxNameHash] != hash || pod.Annotations["note"] != "hi" {
		t.Errorf("pod metadata = %v / %v", pod.Labels, pod.Annotations)
	}
	if pod.Annotations[labels.PropagatedLabels] != "app" || pod.Annotations[labels.PropagatedAnnotations] != "note" {
		t.Errorf("tracking annotations = %v", pod.Annotations)
	}
	svc := &corev1.Service{}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: sb.Name}, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector[labels.SandboxNameHash] != hash ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" || svc.Spec.Ports[0].Port != 8888 {
		t.Errorf("service = %+v", svc.Spec)
	}
	if c := metav1.GetControllerOf(svc); c == nil || c.UID != got.UID {
		t.Errorf("service owner = %+v", svc.OwnerReferences)
	}
}

func TestMinimalSandboxReadyWithoutService(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "minimal").create(t)
	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	if c := condition(got, "Ready"); c.Message != "Pod is Ready" {
		t.Errorf("Ready message = %q", c.Message)
	}
	if got.Status.Service != "" || got.Status.ServiceFQDN != "" {
		t.Errorf("no service was asked for, status = %+v", got.Status)
	}
	err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: sb.Name}, &corev1.Service{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("service must not exist: %v", err)
	}
}

func TestNotReadyPodReportsDependenciesNotReady(t *testing.T) {
	ns := newNamespace(t)
	sb := makeSandbox(ns, "pending").podLabels("test/not-ready", "yes").create(t)
	eventually(t, 20*time.Second, "not-ready message", func() (bool, error) {
		got := getSandbox(t, ns, sb.Name)
		c := condition(got, "Ready")
		return c != nil && c.Reason == sandboxv1beta1.ReasonDependenciesNotReady &&
			c.Message == "Pod exists with phase: Pending", fmt.Errorf("%+v", c)
	})
}

func TestSuspendResumeKeepsServiceAndVolumes(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "sr").service(true).vct("data").create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	pod1, err := getPod(ns, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "data-sr"}, pvc); err != nil {
		t.Fatalf("pvc: %v", err)
	}

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeSuspended)
	got := waitCondition(t, ns, sb.Name, "Suspended", metav1.ConditionTrue, sandboxv1beta1.ReasonPodTerminated)
	if c := condition(got, "Ready"); c.Reason != sandboxv1beta1.ReasonSandboxSuspended || c.Message != "Sandbox is suspended" {
		t.Errorf("Ready = %+v", c)
	}
	if condition(got, "PodScheduled") != nil || len(got.Status.Conditions) != 2 {
		t.Errorf("suspended conditions = %+v", got.Status.Conditions)
	}
	if got.Status.PodIPs != nil || got.Status.NodeName != "" {
		t.Errorf("pod fields must clear: %+v", got.Status)
	}
	if got.Status.Service == "" || got.Status.LabelSelector == "" {
		t.Errorf("service and selector are kept while suspended: %+v", got.Status)
	}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: sb.Name}, &corev1.Service{}); err != nil {
		t.Errorf("service must survive suspension: %v", err)
	}
	if err := k8s.Get(ctxT(t), client.ObjectKeyFromObject(pvc), &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("pvc must survive suspension: %v", err)
	}

	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	pod2, err := getPod(ns, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if pod2.UID == pod1.UID {
		t.Errorf("resume must create a new pod")
	}
	if !podUsesClaim(pod2, "data-sr") {
		t.Errorf("resumed pod must mount the same PVC: %+v", pod2.Spec.Volumes)
	}
	got = getSandbox(t, ns, sb.Name)
	if c := condition(got, "Suspended"); c.Status != metav1.ConditionFalse || c.Reason != sandboxv1beta1.ReasonNotSuspended {
		t.Errorf("Suspended after resume = %+v", c)
	}
}

func podUsesClaim(p *corev1.Pod, claim string) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

func setMode(t *testing.T, ns, name string, mode sandboxv1beta1.OperatingMode) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"operatingMode":%q}}`, mode)
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8s.Patch(ctxT(t), sb, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("setting operatingMode: %v", err)
	}
}

func TestCreatedSuspendedMakesServiceAndPVCButNoPod(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "cold").service(true).vct("ws").suspended().create(t)
	waitCondition(t, ns, sb.Name, "Suspended", metav1.ConditionTrue, sandboxv1beta1.ReasonPodTerminated)
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "ws-cold"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("pvc: %v", err)
	}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "cold"}, &corev1.Service{}); err != nil {
		t.Errorf("service: %v", err)
	}
	consistently(t, 500*time.Millisecond, "no pod", func() (bool, error) {
		_, err := getPod(ns, "cold")
		return apierrors.IsNotFound(err), err
	})
}

func TestPodDeletedExternallyIsRecreated(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "phoenix").create(t)
	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	suspendedAt := condition(got, "Suspended").LastTransitionTime
	pod, _ := getPod(ns, sb.Name)
	if err := k8s.Delete(ctxT(t), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pod recreated and ready", func() (bool, error) {
		p, err := getPod(ns, sb.Name)
		if err != nil {
			return false, err
		}
		s := getSandbox(t, ns, sb.Name)
		c := condition(s, "Ready")
		return p.UID != pod.UID && c != nil && c.Status == metav1.ConditionTrue, nil
	})
	got = getSandbox(t, ns, sb.Name)
	if c := condition(got, "Suspended"); !c.LastTransitionTime.Equal(&suspendedAt) {
		t.Errorf("Suspended lastTransitionTime moved: %v -> %v", suspendedAt, c.LastTransitionTime)
	}
}

func TestVolumeClaimTemplatesCreatePVCs(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "vol").vct("data").create(t)
	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "data-vol"}, pvc); err != nil {
		t.Fatal(err)
	}
	if c := metav1.GetControllerOf(pvc); c == nil || c.UID != got.UID || c.Kind != "Sandbox" || len(pvc.OwnerReferences) != 1 {
		t.Errorf("pvc owners = %+v", pvc.OwnerReferences)
	}
	if pvc.Labels[labels.SandboxNameHash] != labels.NameHash("vol") {
		t.Errorf("pvc labels = %v", pvc.Labels)
	}
	pod, _ := getPod(ns, sb.Name)
	if !podUsesClaim(pod, "data-vol") {
		t.Errorf("pod volumes = %+v", pod.Spec.Volumes)
	}
}

func TestExpiryRetainTearsDownAndKeepsSandbox(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "expiring").service(true).vct("data").
		shutdownAt(time.Now().Add(3*time.Second), sandboxv1beta1.ShutdownPolicyRetain).create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionFalse, sandboxv1beta1.ReasonSandboxExpired)
	eventually(t, 20*time.Second, "pod and service deleted", func() (bool, error) {
		_, perr := getPod(ns, sb.Name)
		serr := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: sb.Name}, &corev1.Service{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr), nil
	})
	eventually(t, 10*time.Second, "status reset", func() (bool, error) {
		got = getSandbox(t, ns, sb.Name)
		return got.Status.Service == "" && got.Status.ServiceFQDN == "" && got.Status.LabelSelector == "" &&
			len(got.Status.Conditions) == 2, fmt.Errorf("%+v", got.Status)
	})
	if c := condition(got, "Ready"); c.Message != "Sandbox has expired" {
		t.Errorf("Ready = %+v", c)
	}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: "data-expiring"}, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Errorf("expiry must never delete PVCs: %v", err)
	}
	if len(eventsFor(t, ns, sb.Name)) == 0 {
		t.Errorf("expiry must be reported by an event")
	}
}

func TestExpiryDeleteRemovesEverything(t *testing.T) {
	ns := newNamespace(t)
	sb := makeSandbox(ns, "doomed").service(true).vct("data").
		shutdownAt(time.Now().Add(2*time.Second), sandboxv1beta1.ShutdownPolicyDelete).create(t)
	eventually(t, 30*time.Second, "sandbox deleted", gone(&sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}}))
	for _, o := range []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-doomed"}},
	} {
		eventually(t, 30*time.Second, fmt.Sprintf("%T garbage collected", o), gone(o))
	}
}

func TestDeletingSandboxLeavesNothingBehind(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "bye").service(true).vct("data").create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	if err := k8s.Delete(ctxT(t), sb); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data-bye"}},
	} {
		eventually(t, 30*time.Second, fmt.Sprintf("%T removed", o), gone(o))
	}
}

// Security: a tenant must not be able to put another Sandbox's identity
// label (the Service selector) or any system key onto its Pod.
func TestSystemLabelsInTemplateAreNotPropagated(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	victim := makeSandbox(ns, "victim").service(true).create(t)
	waitCondition(t, ns, victim.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	attacker := makeSandbox(ns, "attacker").
		podLabels(labels.SandboxNameHash, labels.NameHash("victim"), labels.WarmPoolSandbox, "x",
			"extensions.agents.x-k8s.io/foo", "y", "team", "red").
		podAnnotations(labels.TraceContext, "{}", labels.PodName, "victim", "ok", "1").create(t)
	waitCondition(t, ns, attacker.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	pod, err := getPod(ns, attacker.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Labels[labels.SandboxNameHash]; got != labels.NameHash("attacker") {
		t.Errorf("attacker pod carries name hash %q, want its own", got)
	}
	for _, k := range []string{labels.WarmPoolSandbox, "extensions.agents.x-k8s.io/foo"} {
		if _, ok := pod.Labels[k]; ok {
			t.Errorf("system label %s propagated", k)
		}
	}
	for _, k := range []string{labels.TraceContext, labels.PodName} {
		if _, ok := pod.Annotations[k]; ok {
			t.Errorf("system annotation %s propagated", k)
		}
	}
	if pod.Labels["team"] != "red" || pod.Annotations["ok"] != "1" {
		t.Errorf("user keys lost: %v %v", pod.Labels, pod.Annotations)
	}
	// The victim's Service still selects only the victim's Pod.
	var pods corev1.PodList
	if err := k8s.List(ctxT(t), &pods, client.InNamespace(ns), client.MatchingLabels{labels.SandboxNameHash: labels.NameHash("victim")}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "victim" {
		t.Errorf("victim selector matches %d pods", len(pods.Items))
	}
}

// A stale system key an older controller propagated is scrubbed, template
// edits reach the live Pod, and keys added by others stay.
func TestPodMetadataFollowsTemplate(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "meta").podLabels("a", "1", "b", "2").create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	pod, _ := getPod(ns, sb.Name)
	// Someone else (a webhook) adds a label; an old controller left a system key.
	patch := fmt.Sprintf(`{"metadata":{"labels":{"webhook":"w","%s":"stale"},"annotations":{"%s":"a,b,%s"}}}`,
		labels.WarmPoolSandbox, labels.PropagatedLabels, labels.WarmPoolSandbox)
	if err := k8s.Patch(ctxT(t), pod, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	// Edit the template: drop b, change a.
	cur := getSandbox(t, ns, sb.Name)
	cur.Spec.PodTemplate.ObjectMeta.Labels = map[string]string{"a": "10"}
	if err := k8s.Update(ctxT(t), cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "pod metadata reconciled", func() (bool, error) {
		p, err := getPod(ns, sb.Name)
		if err != nil {
			return false, err
		}
		_, hasB := p.Labels["b"]
		_, hasStale := p.Labels[labels.WarmPoolSandbox]
		return p.Labels["a"] == "10" && !hasB && !hasStale && p.Labels["webhook"] == "w" &&
			p.Annotations[labels.PropagatedLabels] == "a", fmt.Errorf("labels %v annotations %v", p.Labels, p.Annotations)
	})
}

// Security: Pods, Services and PVCs that are not ours are never taken over.
func TestForeignChildrenAreNeverAdopted(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-owner"}}
	if err := k8s.Create(ctxT(t), owner); err != nil {
		t.Fatal(err)
	}
	yes := true
	foreignRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}
	cases := []struct {
		name    string
		labels  map[string]string
		owners  []metav1.OwnerReference
		wantMsg string
	}{
		{"unowned-unlabelled", nil, nil, "cannot adopt unowned pod"},
		{"owned-by-other", map[string]string{labels.Adoptable: "true"}, []metav1.OwnerReference{foreignRef}, "is owned by ConfigMap/other-owner"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name, Labels: c.labels, OwnerReferences: c.owners},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "busybox"}}},
			}
			if err := k8s.Create(ctxT(t), pod); err != nil {
				t.Fatal(err)
			}
			makeSandbox(ns, c.name).create(t)
			got := waitCondition(t, ns, c.name, "Ready", metav1.ConditionFalse, sandboxv1beta1.ReasonReconcilerError)
			if msg := condition(got, "Ready").Message; !strings.Contains(msg, c.wantMsg) {
				t.Errorf("message %q lacks %q", msg, c.wantMsg)
			}
			p, err := getPod(ns, c.name)
			if err != nil {
				t.Fatal(err)
			}
			if !equalRefs(p.OwnerReferences, c.owners) {
				t.Errorf("foreign pod owners changed: %+v", p.OwnerReferences)
			}
			if got.Status.PodIPs != nil || got.Status.NodeName != "" {
				t.Errorf("foreign pod leaked into status: %+v", got.Status)
			}
		})
	}
	t.Run("adoptable-label", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pre-made", Labels: map[string]string{labels.Adoptable: "true"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "busybox"}}},
		}
		if err := k8s.Create(ctxT(t), pod); err != nil {
			t.Fatal(err)
		}
		sb := makeSandbox(ns, "pre-made").create(t)
		waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
		p, _ := getPod(ns, "pre-made")
		if c := metav1.GetControllerOf(p); c == nil || c.UID != sb.UID || p.UID != pod.UID {
			t.Errorf("pod not adopted in place: %+v", p.OwnerReferences)
		}
	})
	t.Run("suspend-refuses-foreign-pod", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "squatter"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "busybox"}}},
		}
		if err := k8s.Create(ctxT(t), pod); err != nil {
			t.Fatal(err)
		}
		makeSandbox(ns, "squatter").service(true).suspended().create(t)
		got := waitCondition(t, ns, "squatter", "Suspended", metav1.ConditionFalse, sandboxv1beta1.ReasonPodNotOwned)
		if c := condition(got, "Ready"); c.Reason != sandboxv1beta1.ReasonSandboxSuspended || c.Message != "Sandbox is suspending" {
			t.Errorf("Ready = %+v", c)
		}
		if p, err := getPod(ns, "squatter"); err != nil || p.DeletionTimestamp != nil || p.UID != pod.UID {
			t.Errorf("foreign pod touched: %v", err)
		}
	})
}

func equalRefs(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}

// Security: two Pods controlled by one Sandbox make it fail closed.
func TestMultipleOwnedPodsFailClosed(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "twins").create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	cur := getSandbox(t, ns, sb.Name)
	twin := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "twins-2",
			Labels:          map[string]string{labels.SandboxNameHash: labels.NameHash(sb.Name)},
			OwnerReferences: []metav1.OwnerReference{ownerref.Sandbox(cur)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "busybox"}}},
	}
	if err := k8s.Create(ctxT(t), twin); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionFalse, sandboxv1beta1.ReasonMultiplePods)
	if msg := condition(got, "Ready").Message; msg != "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod" {
		t.Errorf("message = %q", msg)
	}
	eventually(t, 10*time.Second, "MultiplePods warning event", func() (bool, error) {
		for _, e := range eventsFor(t, ns, sb.Name) {
			if e.Reason == sandboxv1beta1.ReasonMultiplePods && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	for _, n := range []string{"twins", "twins-2"} {
		if p, err := getPod(ns, n); err != nil || p.DeletionTimestamp != nil {
			t.Errorf("pod %s must be left alone: %v", n, err)
		}
	}
}

// Bad input: a template the apiserver rejects is reported with its message
// and retried with backoff, not in a hot loop.
func TestRejectedPodTemplateBacksOff(t *testing.T) {
	ns := newNamespace(t)
	b := makeSandbox(ns, "bad-template")
	b.sb.Spec.PodTemplate.Spec.Containers[0].Name = "Not_A_DNS_Label"
	sb := b.create(t)
	got := waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionFalse, sandboxv1beta1.ReasonReconcilerError)
	if msg := condition(got, "Ready").Message; !strings.Contains(msg, "spec.containers[0].name") {
		t.Errorf("Ready message must carry the apiserver's reason, got %q", msg)
	}
	eventually(t, 10*time.Second, "FailedCreatePod event", func() (bool, error) {
		for _, e := range eventsFor(t, ns, sb.Name) {
			if e.Reason == "FailedCreatePod" && strings.Contains(e.Note, "spec.containers[0].name") {
				return true, nil
			}
		}
		return false, nil
	})
	// A failing Sandbox is retried with exponential backoff (5 ms doubling
	// per failure in controller-runtime's default limiter): wait for eight
	// failed passes and check that the last gap is far longer than a hot
	// loop's (which would be a few milliseconds).
	key := types.NamespacedName{Namespace: ns, Name: sb.Name}
	var failed []pass
	eventually(t, 30*time.Second, "eight failed passes", func() (bool, error) {
		failed = failed[:0]
		for _, p := range passesOf(key) {
			if p.failed {
				failed = append(failed, p)
			}
		}
		return len(failed) >= 8, fmt.Errorf("%d failed passes", len(failed))
	})
	gaps := make([]time.Duration, 0, len(failed)-1)
	for i := 1; i < len(failed); i++ {
		gaps = append(gaps, failed[i].start.Sub(failed[i-1].start))
	}
	// The eighth failure waits 5ms*2^6 = 320ms; 100ms leaves room for
	// watch-triggered passes that land between the backed-off ones.
	if last := gaps[len(gaps)-1]; last < 100*time.Millisecond {
		t.Errorf("gaps between failed passes %v: failures must back off exponentially", gaps)
	}
}

// Race: flipping operatingMode from many writers never leaves two Pods.
func TestConcurrentOperatingModeFlipsNeverMakeTwoPods(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "flippy").create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	maxPods := 0
	var mu sync.Mutex
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var pods corev1.PodList
			if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err == nil {
				live := 0
				for _, p := range pods.Items {
					if p.DeletionTimestamp == nil {
						live++
					}
				}
				mu.Lock()
				maxPods = max(maxPods, live)
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				mode := sandboxv1beta1.OperatingModeRunning
				if (i+w)%2 == 0 {
					mode = sandboxv1beta1.OperatingModeSuspended
				}
				patch := fmt.Sprintf(`{"spec":{"operatingMode":%q}}`, mode)
				_ = k8s.Patch(context.Background(), &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb.Name}},
					client.RawPatch(types.MergePatchType, []byte(patch)))
				time.Sleep(time.Duration(i%3) * 7 * time.Millisecond)
			}
		}(w)
	}
	wg.Wait()
	setMode(t, ns, sb.Name, sandboxv1beta1.OperatingModeRunning)
	// Settled: exactly one pod, and the Sandbox reports that pod Ready.
	eventually(t, 30*time.Second, "one ready pod", func() (bool, error) {
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		if len(pods.Items) != 1 || len(pods.Items[0].Status.PodIPs) == 0 {
			return false, fmt.Errorf("%d pods", len(pods.Items))
		}
		got := getSandbox(t, ns, sb.Name)
		c := condition(got, "Ready")
		return c != nil && c.Status == metav1.ConditionTrue && len(got.Status.PodIPs) == 1 &&
			got.Status.PodIPs[0] == pods.Items[0].Status.PodIPs[0].IP, fmt.Errorf("ready=%+v ips=%v", c, got.Status.PodIPs)
	})
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	if maxPods > 1 {
		t.Errorf("saw %d live pods at once", maxPods)
	}
}

// Race: deleting Sandboxes while their Pods are being created leaves no
// orphan Pod once garbage collection has run.
func TestDeletionDuringPodCreationLeavesNoOrphans(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	const n = 30
	for i := 0; i < n; i++ {
		sb := makeSandbox(ns, fmt.Sprintf("racer-%d", i)).create(t)
		if err := k8s.Delete(ctxT(t), sb); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "no pods left", func() (bool, error) {
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods remain", len(pods.Items))
	})
}

// The create path costs at most 3 writes per Sandbox: Pod create, one
// not-ready status and the Ready status.
func TestCreatePathWriteBudget(t *testing.T) {
	ns := newNamespace(t)
	const n = 10
	// Only writes in this test's namespace are counted, so other tests'
	// passes still in flight cannot be charged to it.
	for i := 0; i < n; i++ {
		makeSandbox(ns, fmt.Sprintf("budget-%d", i)).create(t)
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("budget-%d", i)
		waitCondition(t, ns, name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
		// Writes that trail Ready (none are expected) land before the count.
		waitSettled(t, ns, name)
	}
	total := 0
	diff := map[string]int{}
	for _, w := range writes.Writes() {
		if w.Namespace == ns {
			diff[w.Verb+" "+w.Resource]++
			total++
		}
	}
	t.Logf("writes for %d sandboxes: %d %v", n, total, diff)
	if per := float64(total) / n; per > 3 {
		t.Errorf("%.1f writes per sandbox, budget is 3", per)
	}
}

// Keep the condition list from growing on repeated passes.
func TestConditionsDoNotAccumulate(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "steady").create(t)
	waitCondition(t, ns, sb.Name, "Ready", metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)
	// Touch labels a few times to force passes, then wait for a finished
	// pass that saw the last touch: without one the check below would be
	// vacuous.
	key := types.NamespacedName{Namespace: ns, Name: sb.Name}
	var touched int64
	for i := 0; i < 5; i++ {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"touch":"%d"}}}`, i)
		obj := getSandbox(t, ns, sb.Name)
		if err := k8s.Patch(ctxT(t), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
		touched = mustRV(obj.ResourceVersion)
	}
	eventually(t, 30*time.Second, "a pass that saw the last touch", func() (bool, error) {
		for _, p := range passesOf(key) {
			if p.sawRV >= touched {
				return true, nil
			}
		}
		return false, nil
	})
	waitSettled(t, ns, sb.Name)
	if got := getSandbox(t, ns, sb.Name); len(got.Status.Conditions) != 3 {
		t.Errorf("conditions = %+v", got.Status.Conditions)
	}
}

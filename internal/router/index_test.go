package router

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func key(name string) SandboxKey { return SandboxKey{Namespace: "default", Name: name} }

func readySandbox(name, uid string, ips ...string) *SandboxRecord {
	return &SandboxRecord{Key: key(name), UID: uid, Ready: true, PodIPs: ips, Ports: []uint16{8888}}
}

func readyPod(name, uid, owner string, ips ...string) *PodRecord {
	return &PodRecord{Namespace: "default", Name: name, UID: uid, OwnerUID: owner, Ready: true, PodIPs: ips}
}

func TestIndexRoutableOnlyWithOwnedReadyPod(t *testing.T) {
	x := NewIndex()
	x.UpsertSandbox(readySandbox("a", "ua", "10.0.0.1"))
	if s := x.Lookup(key("a")); s.Routable || s.Reason != "Sandbox has no running pod" {
		t.Fatalf("no pod yet: %+v", s)
	}
	// A pod with the right name but another owner does not count.
	x.UpsertPod(readyPod("a", "p-foreign", "someone-else", "10.0.0.1"))
	if s := x.Lookup(key("a")); s.Routable {
		t.Fatalf("foreign pod must not make it routable: %+v", s)
	}
	x.DeletePod("p-foreign")
	x.UpsertPod(readyPod("a", "pa", "ua", "10.0.0.1"))
	s := x.Lookup(key("a"))
	if !s.Routable || s.Addrs[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("want routable 10.0.0.1: %+v", s)
	}
	// Flip to NotReady removes routability; delete removes it too.
	p := readyPod("a", "pa", "ua", "10.0.0.1")
	p.Ready = false
	x.UpsertPod(p)
	if x.Lookup(key("a")).Routable {
		t.Fatal("not-ready pod must not be routable")
	}
	x.UpsertPod(readyPod("a", "pa", "ua", "10.0.0.1"))
	x.DeletePod("pa")
	if x.Lookup(key("a")).Routable {
		t.Fatal("deleted pod must not be routable")
	}
	x.DeleteSandbox(key("a"))
	if x.Lookup(key("a")).Exists {
		t.Fatal("deleted sandbox still known")
	}
}

func TestIndexAddressesMustAgree(t *testing.T) {
	x := NewIndex()
	// Sandbox status still shows the old pod's IP; the new pod has another.
	x.UpsertSandbox(readySandbox("a", "ua", "10.0.0.1"))
	x.UpsertPod(readyPod("a", "pa2", "ua", "10.0.0.9"))
	if s := x.Lookup(key("a")); s.Routable {
		t.Fatalf("stale status must not route: %+v", s)
	}
	// Controller catches up: routable at the new IP.
	x.UpsertSandbox(readySandbox("a", "ua", "10.0.0.9"))
	if s := x.Lookup(key("a")); !s.Routable || s.Addrs[0].String() != "10.0.0.9" {
		t.Fatalf("want 10.0.0.9: %+v", s)
	}
	// IP update refreshes and keeps the old address in history.
	x.UpsertSandbox(readySandbox("a", "ua", "10.0.0.10"))
	x.UpsertPod(readyPod("a", "pa2", "ua", "10.0.0.10"))
	s := x.Lookup(key("a"))
	if !s.Routable || s.Addrs[0].String() != "10.0.0.10" || len(s.History) == 0 || s.History[0].String() != "10.0.0.9" {
		t.Fatalf("refresh: %+v", s)
	}
}

func TestIndexIPReuseAcrossSandboxes(t *testing.T) {
	x := NewIndex()
	x.UpsertSandbox(readySandbox("a", "ua", "10.0.0.1"))
	x.UpsertPod(readyPod("a", "pa", "ua", "10.0.0.1"))
	x.UpsertSandbox(readySandbox("b", "ub", "10.0.0.2"))
	x.UpsertPod(readyPod("b", "pb", "ub", "10.0.0.2"))
	if !x.Lookup(key("a")).Routable || !x.Lookup(key("b")).Routable {
		t.Fatal("independent sandboxes should both route")
	}
	// b's new pod got a's IP while a's pod object is still cached: neither
	// may use the ambiguous address.
	x.UpsertSandbox(readySandbox("b", "ub", "10.0.0.1"))
	x.UpsertPod(readyPod("b", "pb", "ub", "10.0.0.1"))
	if x.Lookup(key("a")).Routable || x.Lookup(key("b")).Routable {
		t.Fatal("shared address must not be routable for either sandbox")
	}
	x.DeletePod("pa")
	if !x.Lookup(key("b")).Routable {
		t.Fatal("after a's pod is gone, b owns the address")
	}
}

func TestIndexMultiplePodsAndTerminating(t *testing.T) {
	x := NewIndex()
	x.UpsertSandbox(readySandbox("a", "ua", "10.0.0.1", "10.0.0.2"))
	x.UpsertPod(readyPod("a", "p1", "ua", "10.0.0.1"))
	x.UpsertPod(readyPod("a-2", "p2", "ua", "10.0.0.2"))
	if s := x.Lookup(key("a")); s.Routable {
		t.Fatalf("two live pods: fail closed, got %+v", s)
	}
	p := readyPod("a-2", "p2", "ua", "10.0.0.2")
	p.Deleting = true
	x.UpsertPod(p)
	if s := x.Lookup(key("a")); !s.Routable || s.Addrs[0].String() != "10.0.0.1" {
		t.Fatalf("terminating pod ignored: %+v", s)
	}
}

func TestIndexRecreatedSandboxSameName(t *testing.T) {
	x := NewIndex()
	x.UpsertSandbox(readySandbox("a", "u1", "10.0.0.1"))
	x.UpsertPod(readyPod("a", "p1", "u1", "10.0.0.1"))
	// Recreated: new UID, old pod still cached.
	x.UpsertSandbox(readySandbox("a", "u2", "10.0.0.1"))
	if s := x.Lookup(key("a")); s.Routable {
		t.Fatalf("old incarnation's pod must not serve the new sandbox: %+v", s)
	}
	x.DeletePod("p1")
	x.UpsertPod(readyPod("a", "p2", "u2", "10.0.0.5"))
	x.UpsertSandbox(readySandbox("a", "u2", "10.0.0.5"))
	if s := x.Lookup(key("a")); !s.Routable || s.UID != "u2" {
		t.Fatalf("fresh entry: %+v", s)
	}
}

func TestIndexStates(t *testing.T) {
	x := NewIndex()
	sb := readySandbox("a", "ua", "10.0.0.1")
	sb.Suspended, sb.Ready = true, false
	x.UpsertSandbox(sb)
	if s := x.Lookup(key("a")); !s.Suspended || s.Terminal || s.Routable {
		t.Fatalf("suspended: %+v", s)
	}
	sb = readySandbox("a", "ua")
	sb.Ready, sb.ReadyReason = false, "SandboxExpired"
	x.UpsertSandbox(sb)
	if s := x.Lookup(key("a")); !s.Terminal {
		t.Fatalf("expired is terminal: %+v", s)
	}
	sb = readySandbox("a", "ua")
	sb.Deleting = true
	x.UpsertSandbox(sb)
	if s := x.Lookup(key("a")); !s.Terminal || s.Routable {
		t.Fatalf("deleting is terminal: %+v", s)
	}
}

func TestIndexKnownNamespaceAndNotify(t *testing.T) {
	x := NewIndex()
	ch, release := x.Subscribe(key("a"))
	defer release()
	x.UpsertSandbox(readySandbox("a", "ua"))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("subscriber not notified")
	}
	if !x.KnownNamespace("default") || x.KnownNamespace("other") {
		t.Fatal("namespace bookkeeping")
	}
	x.DeleteSandbox(key("a"))
	if x.KnownNamespace("default") {
		t.Fatal("namespace should be forgotten")
	}
	// Abandoned subscriptions do not accumulate.
	for i := 0; i < 100; i++ {
		_, rel := x.Subscribe(SandboxKey{Namespace: "x", Name: string(rune('a' + i%26))})
		rel()
	}
	x.notify.mu.Lock()
	n := len(x.notify.m)
	x.notify.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d notifier entries leaked", n)
	}
}

func TestPodRecordOwner(t *testing.T) {
	mk := func(apiVersion, kind string, controller bool) *corev1.Pod {
		c := controller
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pu", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: apiVersion, Kind: kind, Name: "s", UID: "owner", Controller: &c}}}}
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{mk("agents.x-k8s.io/v1beta1", "Sandbox", true), "owner"},
		{mk("agents.x-k8s.io/v1alpha1", "Sandbox", true), "owner"},
		{mk("apps/v1", "Deployment", true), ""},
		{mk("other.example.com/v1", "Sandbox", true), ""},
		{mk("agents.x-k8s.io/v1beta1", "Sandbox", false), ""},
	} {
		if got := PodRecordFrom(c.pod).OwnerUID; got != c.want {
			t.Errorf("%v: owner %q, want %q", c.pod.OwnerReferences[0], got, c.want)
		}
	}
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.1.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	r := PodRecordFrom(p)
	if !r.Ready || len(r.PodIPs) != 1 || r.PodIPs[0] != "10.1.1.1" {
		t.Fatalf("ready pod record: %+v", r)
	}
	p.Status.Phase = corev1.PodSucceeded
	if PodRecordFrom(p).Ready {
		t.Fatal("terminal pod is not ready")
	}
}

func TestSandboxRecordFrom(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	now := metav1.Now()
	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: "u", Generation: 2,
			Labels:      map[string]string{"agents.x-k8s.io/warm-pool-sandbox": "abcd1234"},
			Annotations: map[string]string{LastActivityAnnotation: now.UTC().Format(time.RFC3339Nano)}},
		Spec: sandboxv1beta1.SandboxSpec{OperatingMode: sandboxv1beta1.OperatingModeSuspended},
		Status: sandboxv1beta1.SandboxStatus{PodIPs: []string{"10.0.0.1"}, Conditions: []metav1.Condition{
			{Type: "Ready", Status: metav1.ConditionFalse, Reason: "SandboxExpired", ObservedGeneration: 1}}},
	}
	sb.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
		{ContainerPort: 8888}, {ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}}}
	sb.Spec.PodTemplate.Spec.InitContainers = []corev1.Container{
		{Name: "side", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 7000}}},
		{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 7001}}},
	}
	r := SandboxRecordFrom(sb)
	if !r.Suspended || !r.WarmPool || r.Ready || r.LastActivity.IsZero() {
		t.Fatalf("record: %+v", r)
	}
	if r.ReadyReason != "" {
		t.Fatalf("reason of an older generation must not count: %q", r.ReadyReason)
	}
	if len(r.Ports) != 2 || r.Ports[0] != 8888 || r.Ports[1] != 7000 {
		t.Fatalf("ports: %v (want TCP container ports and native sidecars only)", r.Ports)
	}
}

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
		// Only versions the CRD serves name a Sandbox: by default that is
		// v1beta1; v1alpha1 counts once discovery reports it served.
		{mk("agents.x-k8s.io/v1alpha1", "Sandbox", true), ""},
		{mk("agents.x-k8s.io/v9", "Sandbox", true), ""},
		{mk("agents.x-k8s.io", "Sandbox", true), ""},
		{mk("apps/v1", "Deployment", true), ""},
		{mk("other.example.com/v1", "Sandbox", true), ""},
		{mk("agents.x-k8s.io/v1beta1", "SandboxClaim", true), ""},
		{mk("agents.x-k8s.io/v1beta1", "Sandbox", false), ""},
	} {
		if got := PodRecordFrom(c.pod).OwnerUID; got != c.want {
			t.Errorf("%v: owner %q, want %q", c.pod.OwnerReferences[0], got, c.want)
		}
	}
	both := NewSandboxVersions("agents.x-k8s.io/v1beta1", "agents.x-k8s.io/v1alpha1")
	if got := podRecordFrom(mk("agents.x-k8s.io/v1alpha1", "Sandbox", true), both).OwnerUID; got != "owner" {
		t.Errorf("served v1alpha1 owner: %q", got)
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

// TestForeignPodCannotHijackRoute: a pod in namespace B whose controller
// reference carries the UID of namespace A's Sandbox (the attack of issue
// 16 finding 2) must not count as one of A's pods, neither as a second pod
// ("controls more than one pod", 503) nor as A's address.
func TestForeignPodCannotHijackRoute(t *testing.T) {
	x := NewIndex()
	a := SandboxKey{Namespace: "tenant-a", Name: "victim"}
	x.UpsertSandbox(&SandboxRecord{Key: a, UID: "ua", Ready: true, PodIPs: []string{"10.0.0.1"}, Ports: []uint16{8888}})
	x.UpsertPod(&PodRecord{Namespace: "tenant-a", Name: "victim", UID: "pa", OwnerUID: "ua", Ready: true, PodIPs: []string{"10.0.0.1"}})
	if s := x.Lookup(a); !s.Routable {
		t.Fatalf("victim should be routable: %+v", s)
	}
	ch, release := x.Subscribe(a)
	defer release()
	// Pending pod of namespace B, no IP yet, owner UID copied from A.
	x.UpsertPod(&PodRecord{Namespace: "tenant-b", Name: "evil", UID: "pb", OwnerUID: "ua"})
	if s := x.Lookup(a); !s.Routable || s.Addrs[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("foreign pending pod disturbed routing: %+v", s)
	}
	// Running and ready, with an address: still not A's pod.
	x.UpsertPod(&PodRecord{Namespace: "tenant-b", Name: "evil", UID: "pb", OwnerUID: "ua", Ready: true, PodIPs: []string{"10.9.9.9"}})
	s := x.Lookup(a)
	if !s.Routable || len(s.Addrs) != 1 || s.Addrs[0] != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("foreign ready pod disturbed routing: %+v", s)
	}
	if owners := x.AddrOwners(netip.MustParseAddr("10.9.9.9")); len(owners) != 0 {
		t.Fatalf("foreign pod's address attributed to %v", owners)
	}
	select {
	case <-ch:
		t.Fatal("foreign pod events must not even wake A's waiters")
	default:
	}
	// The same pod in A's namespace is what the controller would count.
	x.UpsertPod(&PodRecord{Namespace: "tenant-a", Name: "second", UID: "pa2", OwnerUID: "ua", Ready: true, PodIPs: []string{"10.0.0.2"}})
	if s := x.Lookup(a); s.Routable || s.Reason != "Sandbox controls more than one pod" {
		t.Fatalf("two pods of A's own namespace: %+v", s)
	}
	x.DeletePod("pa2")
	x.DeletePod("pb")
	if s := x.Lookup(a); !s.Routable {
		t.Fatalf("after cleanup: %+v", s)
	}
}

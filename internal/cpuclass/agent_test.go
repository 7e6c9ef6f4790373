package cpuclass

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func pod(ns, name, sa, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("u-" + ns + "-" + name)},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, NodeName: node},
	}
}

func TestParseSelector(t *testing.T) {
	s, err := ParseSelector("agent-sandbox-system/agent-sandbox-controller")
	if err != nil || s != (Selector{Namespace: "agent-sandbox-system", ServiceAccount: "agent-sandbox-controller"}) {
		t.Fatalf("ParseSelector = %+v, %v", s, err)
	}
	for _, bad := range []string{"", "ns", "/sa", "ns/", "NS/sa", "ns/sa/x", "ns/Bad_SA", "../x/sa"} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("ParseSelector(%q) accepted", bad)
		}
	}
}

// The attack: a tenant copies the controller Pod's labels and name, and
// names a service account in its own namespace like the controller's. Only
// the namespace and service account together select, and only on the
// agent's node.
func TestAgentSelectsByIdentityNotLabels(t *testing.T) {
	a := &Agent{NodeName: "node", Select: []Selector{{Namespace: "agent-sandbox-system", ServiceAccount: "agent-sandbox-controller"}}}
	labels := map[string]string{"app.kubernetes.io/name": "agent-sandbox-controller", "control-plane": "controller-manager"}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"the controller", pod("agent-sandbox-system", "agent-sandbox-controller-abc", "agent-sandbox-controller", "node", labels), true},
		{"copied labels, name and service account name in a tenant namespace", pod("tenant", "agent-sandbox-controller-abc", "agent-sandbox-controller", "node", labels), false},
		{"the router in the same namespace", pod("agent-sandbox-system", "sandbox-router-x", "sandbox-router", "node", labels), false},
		{"default service account in the same namespace", pod("agent-sandbox-system", "agent-sandbox-controller-abc", "", "node", labels), false},
		{"the controller on another node", pod("agent-sandbox-system", "agent-sandbox-controller-abc", "agent-sandbox-controller", "other", labels), false},
	} {
		if got := a.selects(tc.pod); got != tc.want {
			t.Errorf("%s: selects = %v, want %v", tc.name, got, tc.want)
		}
	}
	def := &Agent{NodeName: "node", Select: []Selector{{Namespace: "ns", ServiceAccount: "default"}}}
	if !def.selects(pod("ns", "p", "", "node", nil)) {
		t.Error("an empty serviceAccountName is the default account")
	}
}

func TestRunningContainers(t *testing.T) {
	p := pod("ns", "p", "sa", "node", nil)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "a", ContainerID: "containerd://aaa", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "b", ContainerID: "containerd://bbb", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}},
		{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}},
	}
	got := RunningContainers(p)
	if len(got) != 1 || got[0] != "aaa" {
		t.Fatalf("RunningContainers = %v, want [aaa]", got)
	}
}

package sandbox

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podWithContainer(cs corev1.ContainerStatus) *corev1.Pod {
	p := pod(corev1.PodPending, false)
	p.Spec.Containers = []corev1.Container{{Name: "runtime", Image: "registry.example/missing:1"}}
	cs.Name = "runtime"
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

func waiting(reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func TestFindPodProblem(t *testing.T) {
	crash := func(restarts int32, backoff string) *corev1.Pod {
		cs := waiting("CrashLoopBackOff", "back-off "+backoff+" restarting failed container=runtime")
		cs.RestartCount = restarts
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}
		return podWithContainer(cs)
	}
	unsched := pod(corev1.PodPending, false)
	unsched.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory."}
	initFail := pod(corev1.PodPending, false)
	initFail.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	initFail.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "boom"}}}}
	oom := podWithContainer(corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}})

	for _, tc := range []struct {
		name          string
		pod           *corev1.Pod
		reason        string
		summary       string
		detailContain string
	}{
		{"starting", podWithContainer(waiting("ContainerCreating", "")), "", "", ""},
		{"nil", nil, "", "", ""},
		{"image pull", podWithContainer(waiting("ErrImagePull", `failed to pull image "registry.example/missing:1": not found`)),
			"ErrImagePull", `container "runtime" cannot pull image "registry.example/missing:1" (ErrImagePull)`, "not found"},
		{"image back-off reads as the same cause", podWithContainer(waiting("ImagePullBackOff", `Back-off pulling image "registry.example/missing:1"`)),
			"ErrImagePull", `container "runtime" cannot pull image "registry.example/missing:1" (ErrImagePull)`, "Back-off pulling"},
		{"config error", podWithContainer(waiting("CreateContainerConfigError", `secret "creds" not found`)),
			"CreateContainerConfigError", `container "runtime" is waiting: CreateContainerConfigError: secret "creds" not found`, "creds"},
		{"crash loop", crash(2, "10s"), "CrashLoopBackOff",
			`container "runtime" keeps crashing (CrashLoopBackOff); terminated with exit code 3 (Error)`, "back-off 10s"},
		{"crash loop later: same summary", crash(9, "5m0s"), "CrashLoopBackOff",
			`container "runtime" keeps crashing (CrashLoopBackOff); terminated with exit code 3 (Error)`, "back-off 5m0s"},
		{"unschedulable", unsched, "Unschedulable", "Unschedulable: 0/1 nodes are available: 1 Insufficient memory.", "Insufficient memory"},
		{"init container failed", initFail, "Error", `init container "setup" terminated with exit code 1 (Error)`, "boom"},
		{"oom", oom, "OOMKilled", `container "runtime" terminated with exit code 137 (OOMKilled)`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := findPodProblem(tc.pod)
			if tc.reason == "" {
				if p != nil {
					t.Fatalf("want no problem, got %+v", p)
				}
				return
			}
			if p == nil {
				t.Fatal("no problem found")
			}
			if p.Reason != tc.reason || p.Summary != tc.summary || !strings.Contains(p.Detail, tc.detailContain) {
				t.Errorf("got %q / %q / %q\nwant %q / %q / ~%q", p.Reason, p.Summary, p.Detail, tc.reason, tc.summary, tc.detailContain)
			}
		})
	}
}

// TestReadyMessageCarriesPodProblem: the spec's message stays a prefix
// and the problem follows it, also for a failed Pod; suspension hides it.
func TestReadyMessageCarriesPodProblem(t *testing.T) {
	pull := podWithContainer(waiting("ErrImagePull", "x"))
	failed := podWithContainer(corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}})
	failed.Status.Phase = corev1.PodFailed
	for _, tc := range []struct {
		in         conditionInput
		reason, ms string
	}{
		{conditionInput{pod: pull, podOwned: true, serviceRequired: true, serviceExists: true, problem: findPodProblem(pull)},
			"DependenciesNotReady", `Pod exists with phase: Pending; Service Exists; problem: container "runtime" cannot pull image "registry.example/missing:1" (ErrImagePull)`},
		{conditionInput{pod: failed, podOwned: true, problem: findPodProblem(failed)},
			"PodFailed", `Pod failed; problem: container "runtime" terminated with exit code 2 (Error)`},
	} {
		var ready *metav1.Condition
		for _, c := range computeConditions(tc.in) {
			if c.Type == "Ready" {
				ready = &c
			}
		}
		if ready == nil || ready.Reason != tc.reason || ready.Message != tc.ms {
			t.Errorf("Ready = %+v, want %s %q", ready, tc.reason, tc.ms)
		}
	}
}

package sandbox

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type wantCond struct {
	status metav1.ConditionStatus
	reason string
	msg    string
}

func pod(phase corev1.PodPhase, ready bool, ips ...string) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: s},
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func TestComputeConditions(t *testing.T) {
	unscheduled := pod(corev1.PodPending, false)
	unscheduled.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient cpu."}
	noReason := pod(corev1.PodPending, false)
	noReason.Status.Conditions[0] = corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}
	noCond := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}

	cases := []struct {
		name string
		in   conditionInput
		want map[string]wantCond // absent type = must not be present
	}{
		{"no pod, service requested but missing", conditionInput{serviceRequired: true}, map[string]wantCond{
			"Suspended": {"False", "NotSuspended", "Sandbox is not suspended"},
			"Ready":     {"False", "DependenciesNotReady", "Pod does not exist; Service does not exist"},
		}},
		{"service present, pod missing", conditionInput{serviceRequired: true, serviceExists: true}, map[string]wantCond{
			"Ready": {"False", "DependenciesNotReady", "Pod does not exist; Service Exists"},
		}},
		{"pending pod without PodScheduled", conditionInput{pod: noCond, podOwned: true, serviceRequired: true, serviceExists: true}, map[string]wantCond{
			"PodScheduled": {"Unknown", "PodSchedulingUnknown", "Pod has not reported a PodScheduled condition yet"},
			"Ready":        {"False", "DependenciesNotReady", "Pod exists with phase: Pending; Service Exists"},
		}},
		{"running not ready", conditionInput{pod: pod(corev1.PodRunning, false), podOwned: true}, map[string]wantCond{
			"Ready": {"False", "DependenciesNotReady", "Pod is Running but not Ready"},
		}},
		{"ready without IPs", conditionInput{pod: pod(corev1.PodRunning, true), podOwned: true}, map[string]wantCond{
			"Ready": {"False", "DependenciesNotReady", "Pod is Ready but has no podIPs yet"},
		}},
		{"ready", conditionInput{pod: pod(corev1.PodRunning, true, "10.0.0.1"), podOwned: true}, map[string]wantCond{
			"PodScheduled": {"True", "PodScheduled", ""},
			"Ready":        {"True", "DependenciesReady", "Pod is Ready"},
		}},
		{"ready but required service missing", conditionInput{pod: pod(corev1.PodRunning, true, "10.0.0.1"), podOwned: true, serviceRequired: true}, map[string]wantCond{
			"Ready": {"False", "DependenciesNotReady", "Pod is Ready; Service does not exist"},
		}},
		{"suspended with owned pod", conditionInput{suspended: true, pod: pod(corev1.PodRunning, true), podOwned: true}, map[string]wantCond{
			"Suspended":    {"False", "PodTerminating", "Pod is terminating. Sandbox is suspending"},
			"PodScheduled": {"True", "PodScheduled", ""},
			"Ready":        {"False", "SandboxSuspended", "Sandbox is suspending"},
		}},
		{"suspended with foreign pod", conditionInput{suspended: true, pod: pod(corev1.PodRunning, true)}, map[string]wantCond{
			"Suspended": {"False", "PodNotOwned", "Refused to delete pod because it is not owned by this sandbox"},
			"Ready":     {"False", "SandboxSuspended", "Sandbox is suspending"},
		}},
		{"suspended, delete failed", conditionInput{suspended: true, pod: pod(corev1.PodRunning, true), podOwned: true, err: errors.New("failed to delete pod: boom")}, map[string]wantCond{
			"Suspended": {"False", "PodTerminating", "Pod is terminating. Sandbox is suspending"},
			"Ready":     {"False", "ReconcilerError", "Error seen: failed to delete pod: boom"},
		}},
		{"suspended, no pod", conditionInput{suspended: true}, map[string]wantCond{
			"Suspended": {"True", "PodTerminated", "Pod has been terminated. Sandbox is suspended"},
			"Ready":     {"False", "SandboxSuspended", "Sandbox is suspended"},
		}},
		{"suspended, lookup failed", conditionInput{suspended: true, podLookupFailed: true, err: errors.New("x")}, map[string]wantCond{
			"Suspended": {"Unknown", "PodStateUnknown", "Pod state is unknown. Sandbox suspension cannot be confirmed"},
		}},
		{"running, lookup failed", conditionInput{podLookupFailed: true, err: errors.New("x")}, map[string]wantCond{
			"PodScheduled": {"Unknown", "PodSchedulingUnknown", "Pod state is unknown. Pod scheduling cannot be determined"},
			"Ready":        {"False", "ReconcilerError", "Error seen: x"},
		}},
		{"resuming", conditionInput{}, map[string]wantCond{
			"Suspended": {"False", "NotSuspended", "Sandbox is not suspended"},
			"Ready":     {"False", "DependenciesNotReady", "Pod does not exist"},
		}},
		{"phase unknown", conditionInput{pod: pod(corev1.PodUnknown, false), podOwned: true}, map[string]wantCond{
			"Ready": {"False", "DependenciesNotReady", "Pod exists with phase: Unknown"},
		}},
		{"owned pod failed", conditionInput{pod: pod(corev1.PodFailed, false), podOwned: true}, map[string]wantCond{
			"Finished": {"True", "PodFailed", "Pod failed"},
			"Ready":    {"False", "PodFailed", "Pod failed"},
		}},
		{"owned pod succeeded", conditionInput{pod: pod(corev1.PodSucceeded, false), podOwned: true}, map[string]wantCond{
			"Finished": {"True", "PodSucceeded", "Pod completed successfully"},
			"Ready":    {"False", "PodSucceeded", "Pod completed successfully"},
		}},
		{"foreign terminal pod does not finish", conditionInput{pod: pod(corev1.PodSucceeded, false), err: errors.New("not ours")}, map[string]wantCond{
			"Ready": {"False", "ReconcilerError", "Error seen: not ours"},
		}},
		{"error wins", conditionInput{pod: pod(corev1.PodRunning, true, "1.2.3.4"), podOwned: true, err: errors.New("something went wrong")}, map[string]wantCond{
			"Ready": {"False", "ReconcilerError", "Error seen: something went wrong"},
		}},
		{"unschedulable mirrored", conditionInput{pod: unscheduled, podOwned: true}, map[string]wantCond{
			"PodScheduled": {"False", "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu."},
		}},
		{"empty reason falls back", conditionInput{pod: noReason, podOwned: true}, map[string]wantCond{
			"PodScheduled": {"False", "PodSchedulingUnknown", ""},
		}},
		{"multiple pods", conditionInput{multiplePods: &multiplePodsError{n: 2}, err: errors.New("transient")}, map[string]wantCond{
			"Ready": {"False", "MultiplePods", "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]metav1.Condition{}
			for _, c := range computeConditions(tc.in) {
				if _, dup := got[c.Type]; dup {
					t.Fatalf("duplicate condition %s", c.Type)
				}
				got[c.Type] = c
			}
			for typ, w := range tc.want {
				c, ok := got[typ]
				if !ok {
					t.Errorf("missing %s", typ)
					continue
				}
				if c.Status != w.status || c.Reason != w.reason || c.Message != w.msg {
					t.Errorf("%s = %s/%s %q, want %s/%s %q", typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.msg)
				}
			}
			if _, ok := got["Suspended"]; !ok {
				t.Errorf("Suspended must always be present")
			}
			if _, ok := got["Ready"]; !ok {
				t.Errorf("Ready must always be present")
			}
			if _, ok := got["Finished"]; ok && tc.want["Finished"].reason == "" {
				t.Errorf("unexpected Finished")
			}
		})
	}
}

package sandbox

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// conditionInput is everything the conditions depend on, so that
// computeConditions is a pure function with a table test.
type conditionInput struct {
	suspended       bool
	pod             *corev1.Pod
	podOwned        bool
	podLookupFailed bool
	serviceRequired bool
	serviceExists   bool
	multiplePods    *multiplePodsError
	err             error
	// problem is what the owned Pod reports as keeping it from Ready
	// (findPodProblem); it details the Ready message.
	problem *podProblem
}

// computeConditions returns the conditions a pass wants. Suspended and
// Ready are always present; Finished only for a terminal owned Pod;
// PodScheduled only while an owned Pod exists (or Unknown when the Pod
// could not be looked up).
func computeConditions(in conditionInput) []metav1.Condition {
	var out []metav1.Condition
	add := func(t string, s metav1.ConditionStatus, reason, msg string) {
		out = append(out, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg})
	}
	const (
		suspendedT = sandboxv1beta1.SandboxConditionSuspended
		readyT     = sandboxv1beta1.SandboxConditionReady
	)

	// Suspended.
	switch {
	case !in.suspended:
		add(suspendedT, metav1.ConditionFalse, sandboxv1beta1.ReasonNotSuspended, "Sandbox is not suspended")
	case in.pod != nil && in.podOwned:
		add(suspendedT, metav1.ConditionFalse, sandboxv1beta1.ReasonPodTerminating, "Pod is terminating. Sandbox is suspending")
	case in.pod != nil:
		add(suspendedT, metav1.ConditionFalse, sandboxv1beta1.ReasonPodNotOwned, "Refused to delete pod because it is not owned by this sandbox")
	case in.podLookupFailed:
		add(suspendedT, metav1.ConditionUnknown, sandboxv1beta1.ReasonPodStateUnknown, "Pod state is unknown. Sandbox suspension cannot be confirmed")
	default:
		add(suspendedT, metav1.ConditionTrue, sandboxv1beta1.ReasonPodTerminated, "Pod has been terminated. Sandbox is suspended")
	}

	// PodScheduled mirrors the owned Pod's own condition.
	if in.pod != nil && in.podOwned {
		c := podCondition(in.pod, corev1.PodScheduled)
		if c == nil {
			add(sandboxv1beta1.SandboxConditionPodScheduled, metav1.ConditionUnknown, sandboxv1beta1.ReasonPodSchedulingUnknown,
				"Pod has not reported a PodScheduled condition yet")
		} else {
			reason := c.Reason
			if reason == "" {
				reason = sandboxv1beta1.ReasonPodSchedulingUnknown
				if c.Status == corev1.ConditionTrue {
					reason = sandboxv1beta1.ReasonPodScheduled
				}
			}
			add(sandboxv1beta1.SandboxConditionPodScheduled, metav1.ConditionStatus(c.Status), reason, c.Message)
		}
	} else if in.podLookupFailed && !in.suspended {
		add(sandboxv1beta1.SandboxConditionPodScheduled, metav1.ConditionUnknown, sandboxv1beta1.ReasonPodSchedulingUnknown,
			"Pod state is unknown. Pod scheduling cannot be determined")
	}

	// Finished: only an owned Pod's end counts.
	terminal := ""
	if in.pod != nil && in.podOwned {
		switch in.pod.Status.Phase {
		case corev1.PodSucceeded:
			terminal = sandboxv1beta1.ReasonPodSucceeded
			add(sandboxv1beta1.SandboxConditionFinished, metav1.ConditionTrue, terminal, "Pod completed successfully")
		case corev1.PodFailed:
			terminal = sandboxv1beta1.ReasonPodFailed
			add(sandboxv1beta1.SandboxConditionFinished, metav1.ConditionTrue, terminal, "Pod failed")
		}
	}

	// Ready, by precedence.
	switch {
	case in.multiplePods != nil:
		add(readyT, metav1.ConditionFalse, sandboxv1beta1.ReasonMultiplePods, in.multiplePods.Error())
	case in.err != nil:
		add(readyT, metav1.ConditionFalse, sandboxv1beta1.ReasonReconcilerError, "Error seen: "+in.err.Error())
	case in.suspended && in.pod != nil:
		add(readyT, metav1.ConditionFalse, sandboxv1beta1.ReasonSandboxSuspended, "Sandbox is suspending")
	case in.suspended:
		add(readyT, metav1.ConditionFalse, sandboxv1beta1.ReasonSandboxSuspended, "Sandbox is suspended")
	case terminal == sandboxv1beta1.ReasonPodSucceeded:
		add(readyT, metav1.ConditionFalse, terminal, "Pod completed successfully")
	case terminal == sandboxv1beta1.ReasonPodFailed:
		add(readyT, metav1.ConditionFalse, terminal, withProblem("Pod failed", in.problem))
	default:
		ready, msg := podReadiness(in.pod)
		if in.serviceRequired {
			if in.serviceExists {
				msg += "; Service Exists"
			} else {
				msg += "; Service does not exist"
				ready = false
			}
		}
		if ready {
			add(readyT, metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady, msg)
		} else {
			add(readyT, metav1.ConditionFalse, sandboxv1beta1.ReasonDependenciesNotReady, withProblem(msg, in.problem))
		}
	}
	return out
}

// podReadiness says whether a Pod is ready to serve and why not.
func podReadiness(pod *corev1.Pod) (bool, string) {
	switch {
	case pod == nil:
		return false, "Pod does not exist"
	case pod.Status.Phase != corev1.PodRunning:
		return false, fmt.Sprintf("Pod exists with phase: %s", pod.Status.Phase)
	}
	if c := podCondition(pod, corev1.PodReady); c == nil || c.Status != corev1.ConditionTrue {
		return false, "Pod is Running but not Ready"
	}
	if len(pod.Status.PodIPs) == 0 && pod.Status.PodIP == "" {
		return false, "Pod is Ready but has no podIPs yet"
	}
	return true, "Pod is Ready"
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// applyConditions upserts the wanted conditions, keeping lastTransitionTime
// when a status does not flip, and drops PodScheduled and Finished when a
// pass did not compute them. Suspended is never removed.
func applyConditions(sb *sandboxv1beta1.Sandbox, want []metav1.Condition) {
	seen := map[string]bool{}
	for _, c := range want {
		c.ObservedGeneration = sb.Generation
		meta.SetStatusCondition(&sb.Status.Conditions, c)
		seen[c.Type] = true
	}
	for _, t := range []string{sandboxv1beta1.SandboxConditionPodScheduled, sandboxv1beta1.SandboxConditionFinished} {
		if !seen[t] {
			meta.RemoveStatusCondition(&sb.Status.Conditions, t)
		}
	}
}

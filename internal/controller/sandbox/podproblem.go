package sandbox

import (
	"cmp"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// podProblem is why a Sandbox's Pod does not become Ready, when the Pod
// says so: a scheduling failure, a container that cannot start, or one
// that ended badly. It is what a user needs to see on the Sandbox itself
// (as a Deployment shows its ReplicaSet's errors) instead of only on the
// Pod.
type podProblem struct {
	// Reason is the kubelet's or scheduler's reason, normalised so that a
	// stable cause has one value (ImagePullBackOff, which alternates with
	// ErrImagePull while the kubelet retries, reads ErrImagePull).
	Reason string
	// Summary goes into the Ready condition's message. It is built only
	// from stable facts (container name, image, exit code, the
	// scheduler's message) so that the kubelet's retries, back-off
	// countdowns and restart counts do not rewrite the Sandbox's status.
	Summary string
	// Detail is the full message of the Pod at the time, for the event.
	Detail string
	// pod is the Pod reporting it.
	pod *corev1.Pod
}

// Waiting reasons of a container that is merely starting: no problem.
var startingReasons = map[string]bool{"": true, "ContainerCreating": true, "PodInitializing": true}

// imagePullReasons all mean the image cannot be had.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"InvalidImageName": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// findPodProblem returns the first problem the Pod reports, nil when it
// reports none (it may still be starting).
func findPodProblem(pod *corev1.Pod) *podProblem {
	p := findProblem(pod)
	if p != nil {
		p.pod = pod
	}
	return p
}

func findProblem(pod *corev1.Pod) *podProblem {
	if pod == nil || pod.DeletionTimestamp != nil {
		return nil
	}
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason != "" {
		// Unschedulable (and SchedulingGated) come with the scheduler's
		// explanation, which only changes when the cause does.
		p := &podProblem{Reason: c.Reason, Summary: c.Reason, Detail: c.Reason}
		if c.Message != "" {
			p.Summary += ": " + c.Message
			p.Detail = p.Summary
		}
		return p
	}
	check := func(kind string, specs []corev1.Container, statuses []corev1.ContainerStatus) *podProblem {
		images := map[string]string{}
		for _, c := range specs {
			images[c.Name] = c.Image
		}
		for _, cs := range statuses {
			if p := containerProblem(kind, cs, images[cs.Name]); p != nil {
				return p
			}
		}
		return nil
	}
	if p := check("init container", pod.Spec.InitContainers, pod.Status.InitContainerStatuses); p != nil {
		return p
	}
	return check("container", pod.Spec.Containers, pod.Status.ContainerStatuses)
}

func containerProblem(kind string, cs corev1.ContainerStatus, image string) *podProblem {
	who := fmt.Sprintf("%s %q", kind, cs.Name)
	if image == "" {
		image = cs.Image
	}
	if w := cs.State.Waiting; w != nil && !startingReasons[w.Reason] {
		p := &podProblem{Reason: w.Reason, Detail: joinMsg(fmt.Sprintf("%s is waiting: %s", who, w.Reason), w.Message)}
		switch {
		case imagePullReasons[w.Reason]:
			// The pull error's text changes with every retry (and with
			// the back-off in between); the event carries it.
			if w.Reason == "ImagePullBackOff" {
				p.Reason = "ErrImagePull"
			}
			p.Summary = fmt.Sprintf("%s cannot pull image %q (%s)", who, image, p.Reason)
		case w.Reason == "CrashLoopBackOff":
			p.Summary = fmt.Sprintf("%s keeps crashing (CrashLoopBackOff)", who)
			if t := cs.LastTerminationState.Terminated; t != nil {
				p.Summary += "; " + terminatedSummary(t)
			}
		default:
			// CreateContainerConfigError (a missing Secret or ConfigMap),
			// CreateContainerError, RunContainerError: the message names
			// the missing piece and is stable for it.
			p.Summary = p.Detail
		}
		return p
	}
	if t := cs.State.Terminated; t != nil && (t.ExitCode != 0 || t.Reason == "OOMKilled") {
		s := fmt.Sprintf("%s %s", who, terminatedSummary(t))
		return &podProblem{Reason: cmp.Or(t.Reason, "Error"), Summary: s, Detail: joinMsg(s, t.Message)}
	}
	return nil
}

func terminatedSummary(t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("terminated with exit code %d", t.ExitCode)
	if t.Signal != 0 {
		s += fmt.Sprintf(" (signal %d)", t.Signal)
	}
	if t.Reason != "" {
		s += " (" + t.Reason + ")"
	}
	return s
}

func joinMsg(head, msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return head
	}
	return head + ": " + msg
}

// ProblemSeparator starts the detail part of a Ready message, after the
// spec's message; clients (the CLI) split on it to show the problem alone.
const ProblemSeparator = "; problem: "

// problemSeparator is the package's short name for ProblemSeparator.
const problemSeparator = ProblemSeparator

// withProblem appends the problem's summary to a Ready message. The
// spec's message stays a prefix, so clients matching it keep working.
func withProblem(msg string, p *podProblem) string {
	if p == nil {
		return msg
	}
	return msg + problemSeparator + p.Summary
}

// messageProblem returns the problem part of a Ready message, "" if none.
func messageProblem(msg string) string {
	if _, p, ok := strings.Cut(msg, problemSeparator); ok {
		return p
	}
	return ""
}

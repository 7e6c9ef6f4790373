package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestPodProblemSurfaced: a Pod whose container failed shows why in the
// Sandbox's Ready message (reason unchanged) and in one Warning event on
// the Sandbox, which later reconciles of the same cause do not repeat.
func TestPodProblemSurfaced(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	sb := makeSandbox(ns, "crashes").create(t)
	waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionReady, metav1.ConditionTrue, sandboxv1beta1.ReasonDependenciesReady)

	// What a kubelet writes when the container exits with an error and
	// the restart policy does not restart it.
	p, err := getPod(ns, sb.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodFailed
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
			p.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "config file missing"}},
	}}
	if err := k8s.Status().Update(ctxT(t), p); err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, ns, sb.Name, sandboxv1beta1.SandboxConditionReady, metav1.ConditionFalse, sandboxv1beta1.ReasonPodFailed)
	want := `Pod failed; problem: container "` + p.Spec.Containers[0].Name + `" terminated with exit code 3 (Error)`
	if msg := condition(got, sandboxv1beta1.SandboxConditionReady).Message; msg != want {
		t.Errorf("Ready message = %q, want %q", msg, want)
	}
	problemEvents := func() []string {
		var out []string
		for _, e := range eventsFor(t, ns, sb.Name) {
			if e.Type == corev1.EventTypeWarning && e.Reason == "Error" {
				n := int32(1)
				if e.Series != nil {
					n = e.Series.Count
				}
				for range n {
					out = append(out, e.Note)
				}
			}
		}
		return out
	}
	eventually(t, 10*time.Second, "Warning event for the pod problem", func() (bool, error) {
		return len(problemEvents()) > 0, nil
	})
	if ev := problemEvents(); len(ev) != 1 || !strings.Contains(ev[0], "config file missing") || !strings.Contains(ev[0], p.Name) {
		t.Fatalf("events = %q", ev)
	}

	// More passes over the same cause: touch the Pod a few times and wait
	// until the controller has reconciled at least that often.
	before := reconciles.Load()
	rv := got.ResourceVersion
	for i := range 3 {
		patch := []byte(`{"metadata":{"annotations":{"test/touch":"` + string(rune('a'+i)) + `"}}}`)
		if err := k8s.Patch(context.Background(), p, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "reconciles of the touched pod", func() (bool, error) {
		return reconciles.Load()-before >= 3, nil
	})
	if ev := problemEvents(); len(ev) != 1 {
		t.Errorf("the same cause was announced %d times: %q", len(ev), ev)
	}
	if cur := getSandbox(t, ns, sb.Name); cur.ResourceVersion != rv {
		t.Errorf("status rewritten for an unchanged cause: %+v", cur.Status.Conditions)
	}
}

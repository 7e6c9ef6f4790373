package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// After the node agent's checkpoint has stopped a Pod's sandbox, the
// kubelet must not start the workload afresh in that Pod (restartPolicy
// Always) while the controller's deletion is on its way: a clean second
// copy of the process could change the Sandbox's volume after its memory
// was saved. The Pod is left undeleted here to give the kubelet all the
// time it wants: its re-creation of the sandbox must be refused by the
// shim (an event says so) and the container must never run again.
func TestDeepHibernationCheckpointedPodNotRestarted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
	counter := startCounter(ctx, t, "hib-stopped")
	ready, before := counter.pod, counter.before
	if _, err := counter.checkpoint(ctx, ready.UID); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	start := time.Now()

	var refused string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, ready.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll on
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 || (cs.State.Running != nil && p.Status.PodIP != "" && p.Status.PodIP != ready.Status.PodIP) {
				return false, fmt.Errorf("the checkpointed Pod's workload was started again (restarts %d, pod IP %s, was %s; counter before %+v)",
					cs.RestartCount, p.Status.PodIP, ready.Status.PodIP, before)
			}
		}
		evs, err := clientset.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(ready.UID)})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll on
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "was checkpointed") {
				refused = e.Reason + ": " + e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for the kubelet's re-creation of the checkpointed Pod to be refused: %v", err)
	}
	t.Logf("refused %v after the checkpoint: %.300s", time.Since(start).Round(time.Millisecond), refused)
	p, err := pods.Get(ctx, ready.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || len(ready.Status.ContainerStatuses) != 1 {
		t.Fatalf("container statuses %+v", p.Status.ContainerStatuses)
	}
	if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 || cs.ContainerID != ready.Status.ContainerStatuses[0].ContainerID {
		t.Fatalf("container after the checkpoint: restarts %d, ID %s (was %s)", cs.RestartCount, cs.ContainerID, ready.Status.ContainerStatuses[0].ContainerID)
	}
}

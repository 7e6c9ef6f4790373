package warmpool

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// graceSlack is added to a readiness deadline so the requeue lands after it.
const graceSlack = 2 * time.Second

// healthReport splits active members into those to keep and those stuck
// past the readiness grace period.
type healthReport struct {
	keep          []*sandboxv1beta1.Sandbox
	stuck         []*sandboxv1beta1.Sandbox
	unschedulable int
	// recheck is the earliest time a young member's grace runs out; 0 if none.
	recheck time.Duration
}

func isReady(sb *sandboxv1beta1.Sandbox) bool {
	return meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
}

// checkHealth applies the readiness grace period. A member that is not Ready
// after the grace is replaced, unless its Pod is unschedulable: then a
// replacement would be equally unschedulable, so the member is held and
// the pool reports that it is not progressing.
func (r *Reconciler) checkHealth(ctx context.Context, active []*sandboxv1beta1.Sandbox, now time.Time) healthReport {
	var rep healthReport
	grace := r.opts.ReadinessGracePeriod
	for _, sb := range active {
		if isReady(sb) {
			rep.keep = append(rep.keep, sb)
			continue
		}
		age := now.Sub(sb.CreationTimestamp.Time)
		if age <= grace {
			rep.keep = append(rep.keep, sb)
			if left := grace - age + graceSlack; rep.recheck == 0 || left < rep.recheck {
				rep.recheck = left
			}
			continue
		}
		switch hold, err := r.podUnschedulable(ctx, sb); {
		case err != nil:
			// Never delete on information we could not read.
			log.FromContext(ctx).Info("cannot inspect the pod of a stuck sandbox; keeping it this pass", "sandbox", sb.Name, "error", err.Error())
			rep.keep = append(rep.keep, sb)
		case hold:
			rep.unschedulable++
			rep.keep = append(rep.keep, sb)
		default:
			rep.stuck = append(rep.stuck, sb)
		}
	}
	return rep
}

// podUnschedulable reports whether the member's Pod exists, is not
// terminating and the scheduler says it cannot be placed.
func (r *Reconciler) podUnschedulable(ctx context.Context, sb *sandboxv1beta1.Sandbox) (bool, error) {
	name := sb.Annotations[labels.PodName]
	if name == "" {
		name = sb.Name
	}
	var pod corev1.Pod
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: name}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if pod.DeletionTimestamp != nil {
		return false, nil
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable, nil
		}
	}
	return false, nil
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// minExpiryRequeue bounds how soon a future shutdown time is re-checked.
const minExpiryRequeue = 2 * time.Second

func expired(sb *sandboxv1beta1.Sandbox, now time.Time) bool {
	return sb.Spec.ShutdownTime != nil && !now.Before(sb.Spec.ShutdownTime.Time)
}

// markExpired reports expiry in status: Ready=False/SandboxExpired. The Pod
// is gone by then, so PodScheduled goes; Finished stays.
func markExpired(sb *sandboxv1beta1.Sandbox) {
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{
		Type:               sandboxv1beta1.SandboxConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             sandboxv1beta1.ReasonSandboxExpired,
		Message:            "Sandbox has expired",
		ObservedGeneration: sb.Generation,
	})
	meta.RemoveStatusCondition(&sb.Status.Conditions, sandboxv1beta1.SandboxConditionPodScheduled)
}

// reconcileExpired tears an expired Sandbox down in two passes: the first
// only reports expiry, so clients see why before anything disappears; the
// second deletes the Pod and Service (never PVCs) and, with the Delete
// policy, the Sandbox.
func (r *Reconciler) reconcileExpired(ctx context.Context, sb *sandboxv1beta1.Sandbox, old *sandboxv1beta1.SandboxStatus) (ctrl.Result, error) {
	if readyReason(sb) != sandboxv1beta1.ReasonSandboxExpired {
		markExpired(sb)
		if err := r.patchStatus(ctx, sb, old); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, sandboxv1beta1.ReasonSandboxExpired, "Expire",
			"Sandbox reached its shutdown time %s; tearing down (policy %s)", sb.Spec.ShutdownTime.UTC().Format(time.RFC3339), sb.EffectiveShutdownPolicy())
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}

	var errs []error
	podName := sb.Annotations[labels.PodName]
	if podName == "" {
		podName = sb.Name
	}
	if err := r.deleteIfOwned(ctx, sb, kindPod, &corev1.Pod{}, podName); err != nil {
		errs = append(errs, err)
	}
	if err := r.deleteIfOwned(ctx, sb, kindService, &corev1.Service{}, sb.Name); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if sb.EffectiveShutdownPolicy() == sandboxv1beta1.ShutdownPolicyDelete {
		if err := r.Delete(ctx, sb, client.Preconditions{UID: &sb.UID}); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("deleting expired sandbox: %w", err)
		}
		return ctrl.Result{}, nil
	}
	sb.Status = sandboxv1beta1.SandboxStatus{Conditions: sb.Status.Conditions}
	markExpired(sb)
	if apiequality.Semantic.DeepEqual(old, &sb.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.patchStatus(ctx, sb, old)
}

// deleteIfOwned deletes a child only when this Sandbox controls it.
func (r *Reconciler) deleteIfOwned(ctx context.Context, sb *sandboxv1beta1.Sandbox, kind string, obj client.Object, name string) error {
	err := r.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting %T %q: %w", obj, name, err)
	}
	if !ownedBy(obj, sb) {
		log.FromContext(ctx).Info("expiry skips a child this sandbox does not own", "name", name, "kind", fmt.Sprintf("%T", obj))
		return nil
	}
	if obj.GetDeletionTimestamp() != nil {
		return nil
	}
	if err := r.deleteChild(ctx, sb, kind, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %q: %w", name, err)
	}
	return nil
}

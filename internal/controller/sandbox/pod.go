package sandbox

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
)

// podResult is what the pod step found: the Pod the Sandbox tracks (owned
// or not) and whether it is ours.
type podResult struct {
	pod   *corev1.Pod
	owned bool
	// deferred is when a metadata patch held back by write-behind is due.
	deferred time.Duration
}

// multiplePodsError means more than one Pod is controlled by the Sandbox.
// The controller fails closed: it neither picks one nor creates another.
type multiplePodsError struct{ n int }

func (e *multiplePodsError) Error() string {
	return fmt.Sprintf("multiple Pods (%d) are controlled by this Sandbox; refusing to choose or create a Pod", e.n)
}

// reconcilePod finds the Sandbox's Pod and makes it match the desired
// operating mode: deleted when Suspended, created or adopted when Running.
func (r *Reconciler) reconcilePod(ctx context.Context, sb *sandboxv1beta1.Sandbox) (res podResult, err error) {
	ctx, span := tracing.Tracer().Start(ctx, "reconcilePod")
	defer func() { tracing.End(span, err) }()
	pod, err := r.findPod(ctx, sb)
	if err != nil {
		return podResult{}, err
	}
	if sb.IsSuspended() {
		return r.suspendPod(ctx, sb, pod)
	}
	if pod != nil {
		span.AddEvent("ExistingPodStatusObserved", trace.WithAttributes(
			attribute.String("pod.Name", pod.Name), attribute.String("pod.Phase", string(pod.Status.Phase))))
		return r.reconcileExistingPod(ctx, sb, pod)
	}
	res, err = r.createPod(ctx, sb)
	if err == nil {
		span.AddEvent("NewPodStatusObserved", trace.WithAttributes(
			attribute.String("pod.Name", sb.Name), attribute.String("pod.Phase", string(corev1.PodPending))))
	}
	return res, err
}

// findPod resolves the Pod of a Sandbox. Ownership by UID is authoritative;
// the tracking label is only an index.
func (r *Reconciler) findPod(ctx context.Context, sb *sandboxv1beta1.Sandbox) (*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.List(ctx, &list, client.InNamespace(sb.Namespace),
		client.MatchingFields{PodNameHashIndex: labels.NameHash(sb.Name)}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var owned []*corev1.Pod
	for i := range list.Items {
		if ownedBy(&list.Items[i], sb) {
			owned = append(owned, &list.Items[i])
		}
	}
	annotated := sb.Annotations[labels.PodName]
	tracked := annotated
	if tracked == "" {
		tracked = sb.Name
	}
	var pod *corev1.Pod
	for _, p := range owned {
		if p.Name == tracked {
			pod = p
		}
	}
	if pod == nil {
		p := &corev1.Pod{}
		err := r.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: tracked}, p)
		switch {
		case apierrors.IsNotFound(err):
			if annotated != "" {
				if err := r.setPodNameAnnotation(ctx, sb, ""); err != nil {
					return nil, err
				}
			}
		case err != nil:
			return nil, fmt.Errorf("getting pod %q: %w", tracked, err)
		default:
			pod = p
			// Owned but not (yet) in the index, e.g. its label was removed.
			if ownedBy(p, sb) {
				owned = append(owned, p)
			}
		}
	}
	if len(owned) > 1 {
		return nil, &multiplePodsError{n: len(owned)}
	}
	if len(owned) == 1 && (pod == nil || pod.Name != owned[0].Name) {
		// The annotation points at a Pod that is not ours: trust ownership.
		if annotated != "" && annotated != owned[0].Name {
			if err := r.setPodNameAnnotation(ctx, sb, ""); err != nil {
				return nil, err
			}
		}
		pod = owned[0]
	}
	return pod, nil
}

// suspendPod deletes the Sandbox's own Pod; a Pod that is not ours is never
// touched, only reported.
func (r *Reconciler) suspendPod(ctx context.Context, sb *sandboxv1beta1.Sandbox, pod *corev1.Pod) (podResult, error) {
	res := podResult{pod: pod, owned: pod != nil && ownedBy(pod, sb)}
	if pod != nil {
		if res.owned {
			if pod.DeletionTimestamp == nil {
				// Deep hibernation: checkpoint first (no-op when disabled).
				ready, wait, failed, err := r.checkpointBeforeDelete(ctx, sb, pod)
				if err != nil || !ready {
					res.deferred = wait
					return res, err
				}
				if err := r.deleteChild(ctx, sb, kindPod, pod); err != nil && !apierrors.IsNotFound(err) {
					return res, fmt.Errorf("failed to delete pod: %w", err)
				}
				if failed != "" {
					r.Recorder.Eventf(sb, pod, corev1.EventTypeWarning, sandboxv1beta1.ReasonCheckpointFailed, "Suspend", "%s", failed)
				}
				r.Recorder.Eventf(sb, pod, corev1.EventTypeNormal, "Suspending", "Suspend", "Deleting Pod %q to suspend the Sandbox", pod.Name)
			}
		} else {
			log.FromContext(ctx).Info("refusing to delete a pod this sandbox does not own", "pod", pod.Name)
		}
	}
	if sb.Annotations[labels.PodName] != "" {
		if err := r.setPodNameAnnotation(ctx, sb, ""); err != nil {
			return res, err
		}
	}
	return res, nil
}

// reconcileExistingPod adopts an authorised unowned Pod, refuses a foreign
// one, and keeps the Pod's metadata in line with the template. The Pod spec
// is never changed after creation.
func (r *Reconciler) reconcileExistingPod(ctx context.Context, sb *sandboxv1beta1.Sandbox, pod *corev1.Pod) (podResult, error) {
	ctrlRef := metav1.GetControllerOf(pod)
	if ctrlRef != nil && ctrlRef.UID != sb.UID {
		if sb.Annotations[labels.PodName] != "" {
			if err := r.setPodNameAnnotation(ctx, sb, ""); err != nil {
				return podResult{pod: pod}, err
			}
		}
		return podResult{pod: pod}, foreignOwnerError("pod", pod.Name, pod, sb)
	}
	adopting := ctrlRef == nil
	if adopting && !adoptable(pod, sb) {
		return podResult{pod: pod}, fmt.Errorf("cannot adopt unowned pod %q: missing required pool authorization label (%q) or sandbox tracking label (%q)",
			pod.Name, labels.Adoptable, labels.SandboxNameHash)
	}
	if !adopting {
		r.observeRestore(ctx, sb, pod)
	}
	// Wait for a terminating Pod to go instead of overlapping it.
	if pod.DeletionTimestamp != nil && !adopting {
		return podResult{pod: pod, owned: true}, nil
	}
	lp, ap := podMetadataPatch(sb, pod.Labels, pod.Annotations)
	key := client.ObjectKeyFromObject(sb)
	if !adopting && len(lp)+len(ap) > 0 {
		if wait := r.behind.wait(key, r.now()); wait > 0 {
			return podResult{pod: pod, owned: true, deferred: wait}, nil
		}
	} else {
		r.behind.clear(key)
	}
	if adopting || len(lp) > 0 || len(ap) > 0 {
		p := mergepatch.Patch{Meta: mergepatch.Meta{Labels: lp, Annotations: ap}}
		if adopting {
			// Adoption is guarded by the resourceVersion: never take over a
			// Pod that changed since we decided it was adoptable.
			p.Meta.OwnerReferences = append(append([]metav1.OwnerReference(nil), pod.OwnerReferences...), ownerref.Sandbox(sb))
			p.Meta.ResourceVersion = pod.ResourceVersion
		}
		patch, err := p.Client()
		if err != nil {
			return podResult{pod: pod}, fmt.Errorf("pod %q: %w", pod.Name, err)
		}
		if err := r.Patch(ctx, pod, patch); err != nil {
			return podResult{pod: pod, owned: !adopting}, fmt.Errorf("patching pod %q: %w", pod.Name, err)
		}
	}
	if pod.Name != sb.Name && sb.Annotations[labels.PodName] == "" {
		if err := r.setPodNameAnnotation(ctx, sb, pod.Name); err != nil {
			return podResult{pod: pod, owned: true}, err
		}
	}
	return podResult{pod: pod, owned: true}, nil
}

// createPod creates the Pod named after the Sandbox from its template.
func (r *Reconciler) createPod(ctx context.Context, sb *sandboxv1beta1.Sandbox) (podResult, error) {
	pod := buildPod(sb)
	r.restoreIntoPod(sb, pod)
	err := r.createChild(ctx, sb, kindPod, pod)
	if apierrors.IsAlreadyExists(err) {
		// Our cache has not seen it yet: ours from an earlier pass (its
		// owner UID says so, and it is used as it is), or someone else's,
		// which the adoption rules decide on.
		existing := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
		if err := r.readExisting(ctx, sb, kindPod, existing); err != nil {
			return podResult{}, fmt.Errorf("getting existing pod %q: %w", pod.Name, err)
		}
		return r.reconcileExistingPod(ctx, sb, existing)
	}
	if err != nil {
		r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "FailedCreatePod", "Create", "Error creating Pod %q: %v", pod.Name, err)
		return podResult{}, fmt.Errorf("creating pod %q: %w", pod.Name, err)
	}
	return podResult{pod: pod, owned: true}, nil
}

// buildPod renders the Pod of a Sandbox.
func buildPod(sb *sandboxv1beta1.Sandbox) *corev1.Pod {
	l, a := newPodMetadata(sb)
	spec := sb.Spec.PodTemplate.Spec.DeepCopy()
	spec.Volumes = mergeVolumeClaimVolumes(spec.Volumes, sb)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            sb.Name,
			Namespace:       sb.Namespace,
			Labels:          l,
			Annotations:     a,
			OwnerReferences: []metav1.OwnerReference{ownerref.Sandbox(sb)},
		},
		Spec: *spec,
	}
}

// mergeVolumeClaimVolumes adds one volume per volume claim template, named
// like the template and backed by the claim <template>-<sandbox>. A template
// volume of the same name is replaced, as a StatefulSet does.
func mergeVolumeClaimVolumes(vols []corev1.Volume, sb *sandboxv1beta1.Sandbox) []corev1.Volume {
	if len(sb.Spec.VolumeClaimTemplates) == 0 {
		return vols
	}
	claimed := map[string]bool{}
	for _, t := range sb.Spec.VolumeClaimTemplates {
		claimed[t.Name] = true
	}
	out := make([]corev1.Volume, 0, len(vols)+len(sb.Spec.VolumeClaimTemplates))
	for _, v := range vols {
		if !claimed[v.Name] {
			out = append(out, v)
		}
	}
	for _, t := range sb.Spec.VolumeClaimTemplates {
		out = append(out, corev1.Volume{
			Name: t.Name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: pvcName(t.Name, sb.Name),
			}},
		})
	}
	return out
}

// setPodNameAnnotation sets (or with "" removes) the pod-name annotation on
// the Sandbox with a merge patch of just that key.
func (r *Reconciler) setPodNameAnnotation(ctx context.Context, sb *sandboxv1beta1.Sandbox, name string) error {
	var v *string // nil removes it
	if name != "" {
		v = &name
	}
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{Annotations: map[string]*string{labels.PodName: v}}}.Client()
	if err != nil {
		return fmt.Errorf("sandbox %q: %w", sb.Name, err)
	}
	patched := sb.DeepCopy()
	if err := r.Patch(ctx, patched, patch); err != nil {
		return fmt.Errorf("updating %s annotation: %w", labels.PodName, err)
	}
	sb.Annotations = patched.Annotations
	sb.ResourceVersion = patched.ResourceVersion
	return nil
}

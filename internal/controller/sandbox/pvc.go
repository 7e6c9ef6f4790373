package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
)

// pvcName is the name of the claim made from template vct for a Sandbox.
func pvcName(vct, sandbox string) string { return vct + "-" + sandbox }

// reconcilePVCs creates the Sandbox's PVCs. They are never deleted here: not
// on suspend, not on expiry; only garbage collection removes them with the
// Sandbox, so user data survives everything else.
func (r *Reconciler) reconcilePVCs(ctx context.Context, sb *sandboxv1beta1.Sandbox) (err error) {
	ctx, span := tracing.Tracer().Start(ctx, "reconcilePVCs")
	defer func() { tracing.End(span, err) }()
	var errs []error
	for _, t := range sb.Spec.VolumeClaimTemplates {
		if err := r.reconcilePVC(ctx, sb, t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) reconcilePVC(ctx context.Context, sb *sandboxv1beta1.Sandbox, t sandboxv1beta1.PersistentVolumeClaimTemplate) error {
	name := pvcName(t.Name, sb.Name)
	existing := &corev1.PersistentVolumeClaim{}
	err := r.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: name}, existing)
	if apierrors.IsNotFound(err) {
		err = r.createChild(ctx, sb, kindPVC, buildPVC(sb, t))
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, "FailedCreatePVC", "Create", "Error creating PVC %q: %v", name, err)
			return fmt.Errorf("creating PVC %q: %w", name, err)
		}
		// The cache has not seen it yet: the ownership rules below decide
		// on what is there, so a foreign claim is reported at once rather
		// than mounted.
		existing = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: name}}
		err = r.readExisting(ctx, sb, kindPVC, existing)
	}
	if err != nil {
		return fmt.Errorf("getting PVC %q: %w", name, err)
	}
	switch c := metav1.GetControllerOf(existing); {
	case c != nil && c.UID == sb.UID:
		return nil
	case c != nil:
		return foreignOwnerError("PVC", name, existing, sb)
	case !adoptable(existing, sb):
		return fmt.Errorf("cannot adopt unowned PVC %q: missing required pool authorization label (%q) or sandbox tracking label (%q)",
			name, labels.Adoptable, labels.SandboxNameHash)
	}
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{
		OwnerReferences: append(append([]metav1.OwnerReference(nil), existing.OwnerReferences...), ownerref.Sandbox(sb)),
		ResourceVersion: existing.ResourceVersion,
	}}.Client()
	if err != nil {
		return fmt.Errorf("PVC %q: %w", name, err)
	}
	if err := r.Patch(ctx, existing, patch); err != nil {
		return fmt.Errorf("adopting PVC %q: %w", name, err)
	}
	return nil
}

// buildPVC renders the claim of template t for a Sandbox.
func buildPVC(sb *sandboxv1beta1.Sandbox, t sandboxv1beta1.PersistentVolumeClaimTemplate) *corev1.PersistentVolumeClaim {
	l := maps.Clone(t.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[labels.SandboxNameHash] = labels.NameHash(sb.Name)
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:            pvcName(t.Name, sb.Name),
			Namespace:       sb.Namespace,
			Labels:          l,
			Annotations:     maps.Clone(t.Annotations),
			OwnerReferences: []metav1.OwnerReference{ownerref.Sandbox(sb)},
		},
		Spec: *t.Spec.DeepCopy(),
	}
}

// Package template is the SandboxTemplate controller: it keeps the one
// shared, secure by default NetworkPolicy of each template (or none, when
// the template opts out with networkPolicyManagement: Unmanaged) and the
// template's name-hash label, the policy's pod selector value. What the
// policy says, and everything else a template renders into (Sandboxes,
// secure defaults, hashes), is internal/blueprint's: the controller only
// converges the cluster towards it.
package template

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
)

// ControllerName is the reporting controller of the template controller's
// events.
const ControllerName = "sandboxtemplate-controller"

// Event reasons of the template controller.
const (
	ReasonNetworkPolicyConflict = "NetworkPolicyConflict"
)

// Options configure the template controller.
type Options struct {
	// Workers: concurrent reconciles (--sandbox-template-concurrent-workers);
	// 1 when unset.
	Workers int
}

// Reconciler keeps the shared NetworkPolicy of each SandboxTemplate.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
}

// NewReconciler returns a Reconciler, constructed like the Sandbox, warm
// pool and claim controllers': c is the cached client, recorder receives
// the failure events and may be nil (no events).
func NewReconciler(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	return &Reconciler{client: c, recorder: recorder, opts: opts}
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxtemplate").
		For(&extv1beta1.SandboxTemplate{}).
		Owns(&networkingv1.NetworkPolicy{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers}).
		Complete(r)
}

// Reconcile labels the template with its name hash (the NetworkPolicy pod
// selector value) and converges the shared NetworkPolicy.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	var tmpl extv1beta1.SandboxTemplate
	if err := r.client.Get(ctx, req.NamespacedName, &tmpl); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx, span := tracing.Start(ctx, &tmpl, "ReconcileSandboxTemplate")
	defer func() { tracing.End(span, err) }()
	if !tmpl.DeletionTimestamp.IsZero() {
		// The policy goes with the template through its owner reference.
		return ctrl.Result{}, nil
	}
	if err := r.ensureHashLabel(ctx, &tmpl); err != nil {
		return ctrl.Result{}, err
	}
	if blueprint.IsManaged(&tmpl) {
		return ctrl.Result{}, r.ensurePolicy(ctx, &tmpl)
	}
	return ctrl.Result{}, r.removePolicy(ctx, &tmpl)
}

func (r *Reconciler) ensureHashLabel(ctx context.Context, tmpl *extv1beta1.SandboxTemplate) error {
	want := labels.NameHash(tmpl.Name)
	if tmpl.Labels[labels.SandboxTemplateRefHash] == want {
		return nil
	}
	patch, err := mergepatch.Patch{Meta: mergepatch.Meta{Labels: map[string]*string{labels.SandboxTemplateRefHash: mergepatch.Set(want)}}}.Client()
	if err != nil {
		return fmt.Errorf("hash label patch: %w", err)
	}
	if err := r.client.Patch(ctx, tmpl, patch); err != nil {
		return fmt.Errorf("labelling SandboxTemplate %q with its name hash: %w", tmpl.Name, err)
	}
	return nil
}

func (r *Reconciler) getPolicy(ctx context.Context, tmpl *extv1beta1.SandboxTemplate) (*networkingv1.NetworkPolicy, error) {
	var np networkingv1.NetworkPolicy
	key := client.ObjectKey{Namespace: tmpl.Namespace, Name: blueprint.NetworkPolicyName(tmpl.Name)}
	if err := r.client.Get(ctx, key, &np); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting NetworkPolicy %q: %w", key.Name, err)
	}
	return &np, nil
}

func (r *Reconciler) ensurePolicy(ctx context.Context, tmpl *extv1beta1.SandboxTemplate) error {
	existing, err := r.getPolicy(ctx, tmpl)
	if err != nil {
		return err
	}
	desired := blueprint.NetworkPolicySpec(tmpl)
	if existing == nil {
		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{
				Name: blueprint.NetworkPolicyName(tmpl.Name), Namespace: tmpl.Namespace,
				OwnerReferences: []metav1.OwnerReference{ownerref.Template(tmpl)},
			},
			Spec: desired,
		}
		if err := r.client.Create(ctx, np); err != nil {
			return fmt.Errorf("creating NetworkPolicy %q: %w", np.Name, err)
		}
		log.FromContext(ctx).V(1).Info("created NetworkPolicy", "networkPolicy", np.Name)
		return nil
	}
	if !metav1.IsControlledBy(existing, tmpl) {
		// A same-named policy someone else made may be looser or stricter
		// than ours; silently taking it over could open traffic, so refuse.
		err := fmt.Errorf("refusing to update NetworkPolicy %q as it is not controlled by SandboxTemplate %q", existing.Name, tmpl.Name)
		r.event(tmpl, ReasonNetworkPolicyConflict, "Reconciling", err.Error())
		return err
	}
	if equality.Semantic.DeepEqual(existing.Spec, desired) {
		return nil
	}
	existing.Spec = desired
	if err := r.client.Update(ctx, existing); err != nil {
		return fmt.Errorf("updating NetworkPolicy %q: %w", existing.Name, err)
	}
	log.FromContext(ctx).V(1).Info("updated NetworkPolicy", "networkPolicy", existing.Name)
	return nil
}

func (r *Reconciler) removePolicy(ctx context.Context, tmpl *extv1beta1.SandboxTemplate) error {
	existing, err := r.getPolicy(ctx, tmpl)
	if err != nil || existing == nil {
		return err
	}
	if !metav1.IsControlledBy(existing, tmpl) {
		log.FromContext(ctx).Info("leaving a NetworkPolicy this template does not control", "networkPolicy", existing.Name)
		return nil
	}
	if err := r.client.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting NetworkPolicy %q: %w", existing.Name, err)
	}
	return nil
}

func (r *Reconciler) event(obj runtime.Object, reason, action, note string) {
	if r.recorder != nil {
		r.recorder.Eventf(obj, nil, "Warning", reason, action, "%s", note)
	}
}

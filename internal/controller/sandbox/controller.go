package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/expectations"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
)

// ControllerName is the reporting name of the Sandbox controller.
const ControllerName = "sandbox-controller"

// PodNameHashIndex is the field index of Pods by their sandbox-name-hash
// label, so a reconcile finds its Pod without listing the namespace.
const PodNameHashIndex = ".metadata.labels[" + labels.SandboxNameHash + "]"

// Options configure the Sandbox controller.
type Options struct {
	// ClusterDomain is used in status.serviceFQDN.
	ClusterDomain string
	// Workers is the number of concurrent reconciles.
	Workers int
	// StatusCoalesceWindow delays status writes that only report or refine
	// a provisioning state (a new Sandbox's first "Pod exists with phase:
	// Pending", then "Running but not Ready"), so a Sandbox that becomes
	// Ready within the window costs a single status write. Ready
	// transitions, errors, suspension and expiry are never delayed. 0
	// writes every change at once.
	StatusCoalesceWindow time.Duration
	// WriteBehindWindow defers the metadata patch of an already-owned Pod
	// (drift of its labels and annotations, e.g. the relabel after a claim
	// adopts a warm Sandbox) by up to min(window, 1s), so bursts of claims
	// keep the apiserver for the writes they wait on. 0 writes at once.
	WriteBehindWindow time.Duration
	// DeepHibernation checkpoints gVisor Pods on suspend through the node
	// agent and restores them on resume (see hibernate.go). Off by default.
	DeepHibernation bool
	// HibernationRuntimeClasses are the RuntimeClasses run by the gVisor
	// hibernation shim; default ["gvisor"].
	HibernationRuntimeClasses []string
	// CheckpointTimeout bounds the wait for the node agent on suspend;
	// default DefaultCheckpointTimeout.
	CheckpointTimeout time.Duration
}

// Reconciler reconciles Sandboxes.
type Reconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder recorder.EventRecorder
	Options  Options
	// Now is the clock; tests replace it.
	Now func() time.Time

	// apiReader reads past the informer cache, for the one question the
	// cache cannot answer yet: whose is the object a create just collided
	// with?
	apiReader client.Reader
	// exp holds the creates and deletes of children the cache has not shown
	// yet (handler.go feeds it); a pass waits until they are seen.
	exp *expectations.Children

	clock  *writeClock
	behind *writeBehind
}

// childWriteTimeout bounds how long unobserved child writes hold a Sandbox
// back. Informer events are not lost in practice (a relist replays what a
// dropped watch missed), so this only matters for a child created and
// deleted again inside a watch outage; a pass that runs after it on a
// stale cache at worst repeats a create, which then gets AlreadyExists and
// is recognised as ours.
const childWriteTimeout = time.Minute

// +kubebuilder:rbac:groups=agents.x-k8s.io,resources=sandboxes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=agents.x-k8s.io,resources=sandboxes/status;sandboxes/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods;services;persistentvolumeclaims,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager builds the controller from mgr's clients and registers
// it: NewReconciler(...).SetupWithManager(mgr) with the manager's cached
// client, API reader and event recorder.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	return newFromManager(mgr, opts).SetupWithManager(mgr)
}

func newFromManager(mgr ctrl.Manager, opts Options) *Reconciler {
	return NewReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(ControllerName), opts)
}

// NewReconciler returns a Reconciler, constructed like the claim and warm
// pool controllers': c is the cached client, api an uncached reader used
// only to settle whose an object a create collided with is, recorder
// receives the events.
func NewReconciler(c client.Client, api client.Reader, recorder recorder.EventRecorder, opts Options) *Reconciler {
	if opts.ClusterDomain == "" {
		opts.ClusterDomain = "cluster.local"
	}
	if opts.Workers <= 0 {
		opts.Workers = 100
	}
	return &Reconciler{
		Client:    c,
		Scheme:    c.Scheme(),
		Recorder:  recorder,
		Options:   opts,
		apiReader: api,
		exp:       expectations.NewChildren(childWriteTimeout),
		clock:     newWriteClock(),
		behind:    newWriteBehind(opts.WriteBehindWindow),
	}
}

// SetupWithManager registers the Pod index and the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return r.setup(mgr, nil)
}

// setup lets tests wrap the reconciler (for example to count passes).
func (r *Reconciler) setup(mgr ctrl.Manager, wrap func(reconcile.Reconciler) reconcile.Reconciler) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, PodNameHashIndex,
		func(o client.Object) []string {
			if v, ok := o.GetLabels()[labels.SandboxNameHash]; ok {
				return []string{v}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("indexing pods by sandbox name hash: %w", err)
	}
	var rec reconcile.Reconciler = r
	if wrap != nil {
		rec = wrap(r)
	}
	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &sandboxv1beta1.Sandbox{}, handler.OnlyControllerOwner())
	children := func(kind string, updates bool) handler.EventHandler {
		return childEvents{kind: kind, exp: r.exp, owner: owner, updates: updates}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandbox").
		For(&sandboxv1beta1.Sandbox{}, builder.WithPredicates(sandboxChanged())).
		Watches(&corev1.Pod{}, children(kindPod, true)).
		Watches(&corev1.Service{}, children(kindService, true)).
		// PVC events only feed expectations (and wake a pass waiting on one).
		Watches(&corev1.PersistentVolumeClaim{}, children(kindPVC, false)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Workers}).
		Complete(rec)
}

// forget drops the per-Sandbox state of a Sandbox that is gone or going.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.clock.drop(key)
	r.behind.clear(key)
	r.exp.Forget(sandboxKey(key.Namespace, key.Name))
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile brings one Sandbox's children and status in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	sb := &sandboxv1beta1.Sandbox{}
	if err := r.Get(ctx, req.NamespacedName, sb); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting sandbox: %w", err)
	}
	// Deletion cascades through owner references; there is nothing to do.
	if sb.DeletionTimestamp != nil {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	// A child this controller created or deleted is not in the cache yet:
	// acting now would read it as missing (create it again) or still there
	// (delete it again). The child's informer event enqueues this Sandbox
	// once it lands, so wait for that without writing anything; the
	// requeue is only the fallback for an event that never comes.
	if wait := r.exp.Wait(sandboxKey(sb.Namespace, sb.Name), sb.UID); wait > 0 {
		log.FromContext(ctx).V(1).Info("waiting for the cache to show our writes", "pending", r.exp.Pending(sandboxKey(sb.Namespace, sb.Name), sb.UID))
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	ctx, span := tracing.Start(ctx, sb, "ReconcileSandbox")
	defer func() { tracing.End(span, err) }()
	log := log.FromContext(ctx)
	r.clock.catchUp(sb)
	old := sb.Status.DeepCopy()
	ctx, statusEvents := withStatusEvents(ctx)

	if expired(sb, r.now()) {
		return r.reconcileExpired(ctx, sb, old)
	}

	deferred, problem, reconcileErr := r.reconcileChildren(ctx, sb)
	if wait, err := r.restoreWatchdog(ctx, sb); err != nil { // deep hibernation, hibernate.go
		reconcileErr = errors.Join(reconcileErr, err)
	} else {
		deferred = earliest(deferred, wait)
	}

	result := ctrl.Result{RequeueAfter: deferred}
	if sb.Spec.ShutdownTime != nil {
		if left := sb.Spec.ShutdownTime.Sub(r.now()); left > 0 {
			result.RequeueAfter = earliest(result.RequeueAfter, max(left, minExpiryRequeue))
		} else {
			// It expired during this pass: report it now, tear down next pass.
			markExpired(sb)
			result.RequeueAfter = time.Millisecond
		}
	}
	wait, err := r.writeStatus(ctx, sb, old)
	if err != nil {
		return ctrl.Result{}, errors.Join(reconcileErr, err)
	}
	result.RequeueAfter = earliest(result.RequeueAfter, wait)
	if wait == 0 {
		// Events after the write they explain (a deferred write defers
		// them: the next pass recomputes the change and queues them again).
		statusEvents.flush(r, sb)
		r.eventMultiplePods(sb, old)
		r.eventPodProblem(sb, old, problem)
	}
	if reconcileErr != nil {
		log.V(1).Info("reconcile failed", "error", reconcileErr.Error())
	}
	return result, reconcileErr
}

// earliest returns the sooner of two requeue delays, 0 meaning none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// reconcileChildren reconciles PVCs, the Pod and the Service, then computes
// the status. It returns when a deferred Pod metadata patch is due, what
// the owned Pod reports as keeping it from Ready (if anything), and the
// error controller-runtime backs off on; a fail-closed refusal (multiple
// pods) is reported in status only, since retrying cannot fix it.
func (r *Reconciler) reconcileChildren(ctx context.Context, sb *sandboxv1beta1.Sandbox) (time.Duration, *podProblem, error) {
	var errs []error
	if err := r.reconcilePVCs(ctx, sb); err != nil {
		errs = append(errs, err)
	}
	pr, podErr := r.reconcilePod(ctx, sb)
	var multi *multiplePodsError
	if errors.As(podErr, &multi) {
		podErr = nil
	} else if podErr != nil {
		errs = append(errs, podErr)
	}
	setPodStatusFields(sb, pr)

	var svc *corev1.Service
	if multi == nil {
		var err error
		svc, err = r.reconcileService(ctx, sb)
		if err != nil {
			errs = append(errs, err)
		}
	}
	setServiceStatusFields(sb, svc, r.Options.ClusterDomain)

	in := conditionInput{
		suspended:       sb.IsSuspended(),
		pod:             pr.pod,
		podOwned:        pr.owned,
		podLookupFailed: pr.pod == nil && podErr != nil,
		serviceRequired: serviceRequired(sb, svc),
		serviceExists:   svc != nil,
		multiplePods:    multi,
		err:             errors.Join(errs...),
	}
	if pr.owned && !sb.IsSuspended() {
		in.problem = findPodProblem(pr.pod)
	}
	applyConditions(sb, computeConditions(in))
	return pr.deferred, in.problem, errors.Join(errs...)
}

// eventMultiplePods records the MultiplePods warning once the status naming
// it is written (never before: a failed write would repeat the event on the
// retry). Comparing with the persisted status announces it once per episode.
func (r *Reconciler) eventMultiplePods(sb *sandboxv1beta1.Sandbox, old *sandboxv1beta1.SandboxStatus) {
	c := readyCondition(&sb.Status)
	if c == nil || c.Reason != sandboxv1beta1.ReasonMultiplePods {
		return
	}
	if was := readyCondition(old); was != nil && was.Reason == sandboxv1beta1.ReasonMultiplePods {
		return
	}
	r.Recorder.Eventf(sb, nil, corev1.EventTypeWarning, sandboxv1beta1.ReasonMultiplePods, "Reconciling", "%s", c.Message)
}

// readyCondition returns the Ready condition of s, or nil.
func readyCondition(s *sandboxv1beta1.SandboxStatus) *metav1.Condition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == sandboxv1beta1.SandboxConditionReady {
			return &s.Conditions[i]
		}
	}
	return nil
}

// eventPodProblem records a Warning event when the status just written
// names a Pod problem that the status before did not. Comparing persisted
// status (not in-memory state) makes it level-triggered: a problem is
// announced once however often the Sandbox is reconciled, and again only
// after its cause changed; a controller restart does not repeat it.
func (r *Reconciler) eventPodProblem(sb *sandboxv1beta1.Sandbox, old *sandboxv1beta1.SandboxStatus, p *podProblem) {
	if p == nil {
		return
	}
	now := readyMessage(&sb.Status)
	if messageProblem(now) != p.Summary || messageProblem(readyMessage(old)) == p.Summary {
		return
	}
	r.Recorder.Eventf(sb, p.pod, corev1.EventTypeWarning, p.Reason, "Provisioning", "Pod %s: %s", p.pod.Name, p.Detail)
}

func readyMessage(s *sandboxv1beta1.SandboxStatus) string {
	for _, c := range s.Conditions {
		if c.Type == sandboxv1beta1.SandboxConditionReady {
			return c.Message
		}
	}
	return ""
}

func readyReason(sb *sandboxv1beta1.Sandbox) string {
	for _, c := range sb.Status.Conditions {
		if c.Type == sandboxv1beta1.SandboxConditionReady {
			return c.Reason
		}
	}
	return ""
}

// Package warmpool owns the SandboxWarmPool controller. A pool keeps
// spec.replicas Sandboxes made from its template ready for claims to adopt.
// It never over-creates from a stale cache (expectations gate every create
// and delete), creates and deletes in slow-start parallel batches, replaces
// members stuck before Ready (but holds unschedulable ones), rolls out
// template changes (Recreate or OnReplenish, keyed by the blueprint hash),
// and reports replicas, readyReplicas and the selector that the scale
// subresource exposes to kubectl scale and HPAs.
//
// controller.go is the reconcile story; members.go sorts members,
// staleness.go decides rollouts, gc.go applies the readiness grace,
// refill.go shapes refills, batching.go runs batches, build.go renders new
// members, status.go writes status, handler.go feeds expectations.
package warmpool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/refill"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/vetting"
	"sigs.k8s.io/agent-sandbox/internal/expectations"
)

// ControllerName is the reporting controller of the pool's events.
const ControllerName = "sandboxwarmpool-controller"

// Event reasons of the pool controller.
const (
	ReasonNotProgressing   = "WarmPoolNotProgressing"
	ReasonProgressing      = "WarmPoolProgressing"
	ReasonTemplateNotFound = "TemplateNotFound"
	ReasonFailedCreate     = "FailedCreate"
	ReasonFailedDelete     = "FailedDelete"
	// ReasonForgedMember: a Sandbox presenting itself as a member is
	// deleted because its content is not the pool's (package vetting).
	ReasonForgedMember = "ForgedMember"
)

// gateFallback is when a pass refused by the expectations gate looks again
// if no watch event wakes it first.
const gateFallback = 30 * time.Second

// Options configure the pool controller; they mirror the
// --sandbox-warm-pool-* flags.
type Options struct {
	// Workers is the number of concurrent reconciles (default 1).
	Workers int
	// MaxBatchSize caps creates and deletes per pool per pass (default 300).
	MaxBatchSize int
	// ReplenishDelay holds refills this long after the pool shrank (0 = off).
	ReplenishDelay time.Duration
	// MaxRefillRate caps creates per second per pool (0 = off).
	MaxRefillRate float64
	// ReadinessGracePeriod is how long a member may stay not Ready before it
	// is replaced (default 5m).
	ReadinessGracePeriod time.Duration
	// UnschedulableRecheckInterval is how often a pool holding
	// unschedulable members looks again (default 1m).
	UnschedulableRecheckInterval time.Duration
	// EnableWarmPoolEviction marks warm pods safe to evict for the cluster
	// autoscaler. The flag defaults to true; the zero Options does not.
	EnableWarmPoolEviction bool
	// StatusWriteInterval is the least time between two status writes of
	// one pool (0 = write every change). Under a stream of claims every
	// adoption and every refill changes the counts; writing them at most
	// this often keeps status current to within the interval at a fraction
	// of the writes.
	StatusWriteInterval time.Duration
	// Vetted is the registry of genuine members shared with the claim
	// controller (nil: a private one).
	Vetted *vetting.Registry
	// Refills is where each pass reports whether it refills the pool, for
	// the claim controller's wait line (nil: a private one).
	Refills *refill.Registry
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.MaxBatchSize <= 0 {
		o.MaxBatchSize = 300
	}
	if o.ReadinessGracePeriod <= 0 {
		o.ReadinessGracePeriod = 5 * time.Minute
	}
	if o.UnschedulableRecheckInterval <= 0 {
		o.UnschedulableRecheckInterval = time.Minute
	}
	if o.Vetted == nil {
		o.Vetted = vetting.NewRegistry()
	}
	if o.Refills == nil {
		o.Refills = refill.NewRegistry()
	}
}

// Reconciler keeps warm pools at their size.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	opts     Options
	exp      *expectations.Expectations
	shaper   *refillShaper
	vetted   *vetting.Registry
	// now is the clock; tests replace it.
	now func() time.Time

	mu sync.Mutex
	// notProgressing and templateMissing remember per pool the state last
	// reported by an event, so events fire on transitions only.
	notProgressing  map[string]bool
	templateMissing map[string]bool
	// lastStatusWrite is when each pool's status was last written.
	lastStatusWrite map[string]time.Time
	// poolUIDs maps pool keys to UIDs, to drop a deleted pool's records
	// from the vetting registry.
	poolUIDs map[string]types.UID

	// members is the incremental member accounting (tally.go). It is used
	// only once sandboxHandler has been built (tracking), since without
	// the handler's records the totals would miss every change.
	members  *memberTracker
	tracking atomic.Bool
	// fullPasses and incrementalPasses count passes, for tests and
	// benchmarks.
	fullPasses, incrementalPasses atomic.Int64
}

// NewReconciler returns a Reconciler. recorder may be nil (no events).
func NewReconciler(c client.Client, recorder events.EventRecorder, opts Options) *Reconciler {
	opts.defaults()
	return &Reconciler{
		client:          c,
		recorder:        recorder,
		opts:            opts,
		exp:             expectations.New(expectations.DefaultTimeout),
		shaper:          newRefillShaper(opts.ReplenishDelay, opts.MaxRefillRate),
		vetted:          opts.Vetted,
		poolUIDs:        map[string]types.UID{},
		members:         newMemberTracker(),
		now:             time.Now,
		notProgressing:  map[string]bool{},
		templateMissing: map[string]bool{},
		lastStatusWrite: map[string]time.Time{},
	}
}

// Expectations exposes the tracker, for tests.
func (r *Reconciler) Expectations() *expectations.Expectations { return r.exp }

// SetupWithManager registers the controller. The field indexes of package
// index must be registered already.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandboxwarmpool").
		For(&extv1beta1.SandboxWarmPool{}).
		Watches(&sandboxv1beta1.Sandbox{}, r.sandboxHandler()).
		Watches(&extv1beta1.SandboxTemplate{}, handler.EnqueueRequestsFromMapFunc(r.poolsForTemplate)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers}).
		Complete(r)
}

// Reconcile converges one pool: sort members, replace stuck ones, create
// the deficit or delete the excess, write status once.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.String()
	var pool extv1beta1.SandboxWarmPool
	if err := r.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting SandboxWarmPool: %w", err)
	}
	if pool.DeletionTimestamp != nil {
		r.forget(key)
		return ctrl.Result{}, nil
	}
	r.mu.Lock()
	if old, ok := r.poolUIDs[key]; ok && old != pool.UID {
		r.vetted.ForgetPool(old)
	}
	r.poolUIDs[key] = pool.UID
	r.mu.Unlock()
	logger := log.FromContext(ctx)
	now := r.now()
	var errs []error
	var requeue []time.Duration

	// Whether every earlier create and delete had been observed must be
	// read before the members are listed: an event arriving between the
	// two would satisfy the expectations while the list still lacks the
	// Sandbox it reports, and the pass would create it a second time.
	observed := r.exp.Satisfied(key)
	// Taken after the expectations are read, for the same reason: a
	// create observed by then has been recorded by then (tally.go).
	snap := r.members.take(key)
	ti, tmplErr := r.template(ctx, &pool)
	if tmplErr != nil && !apierrors.IsNotFound(tmplErr) {
		errs = append(errs, tmplErr)
	}
	if r.tracking.Load() && snap.incrementalOK(&pool, ti, now) {
		if res, err, done := r.incrementalPass(ctx, key, &pool, ti, &snap, observed, now); done {
			return res, err
		}
	}
	r.fullPasses.Add(1)
	r.members.unsync(key) // until this pass has counted
	items, err := r.listMembers(ctx, &pool)
	if err != nil {
		return ctrl.Result{}, err
	}

	// 1. Sort members; under Recreate (and for forged orphans) delete the
	// stale ones, and replace members stuck before Ready.
	m, err := r.classify(ctx, key, &pool, items, ti)
	if err != nil {
		errs = append(errs, err)
	}
	health := r.checkHealth(ctx, m.active, now)
	doomed := slices.Concat(m.stale, health.stuck)
	var later []*sandboxv1beta1.Sandbox
	if len(doomed) > r.opts.MaxBatchSize {
		doomed, later = doomed[:r.opts.MaxBatchSize], doomed[r.opts.MaxBatchSize:]
	}
	deleted, failed, err := r.deleteMembers(ctx, key, &pool, doomed)
	if err != nil {
		r.event(&pool, corev1.EventTypeWarning, ReasonFailedDelete, "Deleting", err.Error())
		errs = append(errs, err)
	}
	// Members we failed to delete, or leave for the next pass, still count.
	active := health.keep
	for _, sb := range slices.Concat(failed, later) {
		if poolControlled(sb, &pool) {
			active = append(active, sb)
		}
	}
	for _, sb := range deleted {
		if poolControlled(sb, &pool) {
			m.terminating++
			m.terminatingUIDs = append(m.terminatingUIDs, sb.UID)
		}
	}
	if len(deleted) > 0 {
		logger.V(1).Info("deleted stale or stuck members", "count", len(deleted))
	}
	if health.recheck > 0 {
		requeue = append(requeue, health.recheck)
	}

	desired := int(pool.DesiredReplicas())
	current := len(active)
	total := current + m.terminating
	ready := 0
	for _, sb := range active {
		if isReady(sb) {
			ready++
		}
	}

	// 2. Create the deficit or delete the excess.
	hold := r.shaper.hold(key, current, desired, now)
	var createErr error
	switch {
	case total < desired && ti != nil && hold > 0:
		requeue = append(requeue, hold)
	case total < desired && ti != nil:
		created, wait, err := r.createDeficit(ctx, key, &pool, ti, min(desired-total, r.opts.MaxBatchSize), now, observed)
		// The new members exist now; counting them at once saves the
		// status write that would report the intermediate count.
		current += created
		if err != nil {
			errs = append(errs, err)
			createErr = err
		}
		requeue = append(requeue, wait)
	case current > desired:
		deleted, wait, err := r.deleteExcess(ctx, key, &pool, active, min(current-desired, r.opts.MaxBatchSize), observed)
		current -= len(deleted)
		gone := make(map[types.UID]bool, len(deleted))
		for _, sb := range deleted {
			if isReady(sb) {
				ready--
			}
			gone[sb.UID] = true
			m.terminatingUIDs = append(m.terminatingUIDs, sb.UID)
		}
		active = slices.DeleteFunc(active, func(sb *sandboxv1beta1.Sandbox) bool { return gone[sb.UID] })
		if err != nil {
			errs = append(errs, err)
		}
		requeue = append(requeue, wait)
	}

	// 3. Report.
	r.reportRefill(&pool, ti, health.unschedulable, createErr)
	if health.unschedulable > 0 {
		requeue = append(requeue, r.opts.UnschedulableRecheckInterval)
	}
	wait, err := r.writeStatus(ctx, key, &pool, computeStatus(&pool, current, ready), now)
	if err != nil {
		errs = append(errs, err)
	} else {
		// Transition events after the status write: a pass whose write
		// fails leaves the remembered state alone, so the retry reports.
		r.reportTemplate(&pool, tmplErr)
		r.reportProgress(&pool, health.unschedulable, desired)
	}
	requeue = append(requeue, wait)
	if err := joinErrs(errs); err != nil {
		return ctrl.Result{}, err
	}
	// Later passes may count from here if this one saw everything: no
	// member left for a later batch, none held as unschedulable (whose
	// events only a full pass reports).
	if ti != nil && len(later) == 0 && health.unschedulable == 0 {
		r.members.synced(key, &pool, ti, r.countMembers(active, m.terminatingUIDs), now)
	}
	return ctrl.Result{RequeueAfter: soonest(requeue)}, nil
}

// countMembers builds the totals of a full pass.
func (r *Reconciler) countMembers(active []*sandboxv1beta1.Sandbox, terminatingUIDs []types.UID) tally {
	t := newTally()
	for _, sb := range active {
		if isReady(sb) {
			t.set(sb.UID, activeReady, time.Time{})
		} else {
			t.set(sb.UID, activeUnready, sb.CreationTimestamp.Add(r.opts.ReadinessGracePeriod+graceSlack))
		}
	}
	for _, uid := range terminatingUIDs {
		t.set(uid, terminating, time.Time{})
	}
	return t
}

// incrementalPass re-classifies only the members changed since the last
// pass and acts on the running totals (tally.go). done is false when a
// change needs a full pass; nothing has been written then.
func (r *Reconciler) incrementalPass(ctx context.Context, key string, pool *extv1beta1.SandboxWarmPool, ti *templateInfo, snap *snapshot, observed bool, now time.Time) (res ctrl.Result, err error, done bool) {
	type change struct {
		uid types.UID
		c   memberClass
		due time.Time
	}
	changes := make([]change, 0, len(snap.dirty))
	for uid, name := range snap.dirty {
		var sb sandboxv1beta1.Sandbox
		// Read back from the cache, which is at least as new as the event.
		switch err := r.client.Get(ctx, name, &sb); {
		case apierrors.IsNotFound(err):
			changes = append(changes, change{uid: uid, c: notMember})
			continue
		case err != nil:
			return ctrl.Result{}, nil, false //nolint:nilerr // done=false: the full pass that follows reads again and reports the error
		}
		if sb.UID != uid {
			// The name was reused: the old member is gone; the new
			// Sandbox has events of its own.
			changes = append(changes, change{uid: uid, c: notMember})
			continue
		}
		c, d, ok := r.quickClass(key, pool, ti, &sb, now)
		if !ok {
			return ctrl.Result{}, nil, false
		}
		changes = append(changes, change{uid, c, d})
	}
	t := snap.track.t
	for _, ch := range changes {
		t.set(ch.uid, ch.c, ch.due)
	}
	desired := int(pool.DesiredReplicas())
	current, total, ready := t.active, t.active+t.terminatingN, t.ready
	if current > desired {
		// Choosing what to delete needs every member: a full pass.
		r.members.unsync(key)
		return ctrl.Result{}, nil, false
	}
	r.incrementalPasses.Add(1)
	r.members.advanced(key, t)
	var requeue []time.Duration
	// A young unready member is looked at again (by a full pass) when its
	// readiness grace runs out, as checkHealth's recheck does.
	if due := t.nextDue(); !due.IsZero() {
		requeue = append(requeue, max(due.Sub(now), time.Millisecond))
	}
	var errs []error
	hold := r.shaper.hold(key, current, desired, now)
	switch {
	case total < desired && hold > 0:
		requeue = append(requeue, hold)
		r.reportRefill(pool, ti, 0, nil)
	case total < desired:
		created, wait, err := r.createDeficit(ctx, key, pool, ti, min(desired-total, r.opts.MaxBatchSize), now, observed)
		current += created
		if err != nil {
			errs = append(errs, err)
		}
		requeue = append(requeue, wait)
		r.reportRefill(pool, ti, 0, err)
	default:
		r.reportRefill(pool, ti, 0, nil)
	}
	wait, err := r.writeStatus(ctx, key, pool, computeStatus(pool, current, ready), now)
	if err != nil {
		errs = append(errs, err)
	} else {
		r.reportTemplate(pool, nil)
	}
	requeue = append(requeue, wait)
	if err := joinErrs(errs); err != nil {
		r.members.unsync(key)
		return ctrl.Result{}, err, true
	}
	return ctrl.Result{RequeueAfter: soonest(requeue)}, nil, true
}

// template reads the pool's template. NotFound is returned for reporting
// but is not retried with backoff: the template watch wakes the pool.
func (r *Reconciler) template(ctx context.Context, pool *extv1beta1.SandboxWarmPool) (*templateInfo, error) {
	var tmpl extv1beta1.SandboxTemplate
	key := client.ObjectKey{Namespace: pool.Namespace, Name: pool.Spec.SandboxTemplateRef.Name}
	if err := r.client.Get(ctx, key, &tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("getting SandboxTemplate %q: %w", key.Name, err)
	}
	return newTemplateInfo(&tmpl), nil
}

// createDeficit creates up to n members, if every earlier write had been
// observed when the members were listed and the refill rate allows, and
// returns how many it created and when to look again.
func (r *Reconciler) createDeficit(ctx context.Context, key string, pool *extv1beta1.SandboxWarmPool, ti *templateInfo, n int, now time.Time, observed bool) (int, time.Duration, error) {
	if !observed {
		// The member count may predate our own writes; their watch
		// events wake us again.
		return 0, gateFallback, nil
	}
	granted, tokenWait := r.shaper.grant(key, n, now)
	if granted == 0 {
		return 0, tokenWait, nil
	}
	// Atomically re-checked and raised, in case another pass raced us.
	if !r.exp.TryExpectCreations(key, granted) {
		// Our earlier creates or deletes are not in the cache yet, so the
		// member count above may be stale. Their watch events wake us.
		r.shaper.refund(key, granted)
		c, d := r.exp.Pending(key)
		log.FromContext(ctx).V(1).Info("waiting for in-flight creates/deletes to be observed", "pendingCreates", c, "pendingDeletes", d)
		return 0, gateFallback, nil
	}
	proto := buildSandbox(pool, ti, r.opts.EnableWarmPoolEviction, r.vetted.DeliveryKey())
	created, err := slowStartBatch(ctx, granted, func(ctx context.Context) error {
		sb := proto.DeepCopy()
		if err := r.client.Create(ctx, sb); err != nil {
			return fmt.Errorf("creating sandbox for SandboxWarmPool %q: %w", pool.Name, err)
		}
		// Our own rendering: vouched for without a comparison.
		r.vetted.Record(pool.UID, sb.UID, ti.blueprintHash)
		return nil
	})
	if created < granted {
		// Creates that failed or never ran will never be observed.
		r.exp.LowerCreations(key, granted-created)
	}
	if err != nil {
		r.event(pool, corev1.EventTypeWarning, ReasonFailedCreate, "Creating", err.Error())
		return created, 0, err
	}
	log.FromContext(ctx).V(1).Info("created members", "count", created, "deficit", n)
	return created, 0, nil
}

// deleteExcess deletes n members, unready first then newest first, if
// every earlier write had been observed when the members were listed.
func (r *Reconciler) deleteExcess(ctx context.Context, key string, pool *extv1beta1.SandboxWarmPool, active []*sandboxv1beta1.Sandbox, n int, observed bool) ([]*sandboxv1beta1.Sandbox, time.Duration, error) {
	if !observed || !r.exp.Satisfied(key) {
		return nil, gateFallback, nil
	}
	victims := slices.Clone(active)
	slices.SortStableFunc(victims, func(a, b *sandboxv1beta1.Sandbox) int {
		if ra, rb := isReady(a), isReady(b); ra != rb {
			if !ra {
				return -1
			}
			return 1
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	})
	log.FromContext(ctx).V(1).Info("deleting excess members", "count", n, "members", len(active), "desired", pool.DesiredReplicas())
	deleted, _, err := r.deleteMembers(ctx, key, pool, victims[:n])
	if err != nil {
		r.event(pool, corev1.EventTypeWarning, ReasonFailedDelete, "Deleting", err.Error())
	}
	return deleted, 0, err
}

// reportProgress emits WarmPoolNotProgressing when members start being held
// as unschedulable and WarmPoolProgressing when that ends.
func (r *Reconciler) reportProgress(pool *extv1beta1.SandboxWarmPool, unschedulable, desired int) {
	key := client.ObjectKeyFromObject(pool).String()
	r.mu.Lock()
	was := r.notProgressing[key]
	r.notProgressing[key] = unschedulable > 0
	r.mu.Unlock()
	switch {
	case unschedulable > 0 && !was:
		r.event(pool, corev1.EventTypeWarning, ReasonNotProgressing, "Reconciling", fmt.Sprintf(
			"%d/%d sandboxes are unschedulable past the %s readiness grace period; holding them instead of replacing (replacements would be equally unschedulable)",
			unschedulable, desired, r.opts.ReadinessGracePeriod))
	case unschedulable == 0 && was:
		r.event(pool, corev1.EventTypeNormal, ReasonProgressing, "Reconciling", "Warm pool is progressing again")
	}
}

// reportTemplate emits a warning when the pool's template goes missing, once
// per transition; the pool keeps its members and creates nothing meanwhile.
func (r *Reconciler) reportTemplate(pool *extv1beta1.SandboxWarmPool, tmplErr error) {
	key := client.ObjectKeyFromObject(pool).String()
	missing := apierrors.IsNotFound(tmplErr)
	r.mu.Lock()
	was := r.templateMissing[key]
	r.templateMissing[key] = missing
	r.mu.Unlock()
	if missing && !was {
		r.event(pool, corev1.EventTypeWarning, ReasonTemplateNotFound, "Reconciling",
			fmt.Sprintf("SandboxTemplate %q not found; not creating sandboxes until it exists", pool.Spec.SandboxTemplateRef.Name))
	}
}

func (r *Reconciler) event(pool *extv1beta1.SandboxWarmPool, typ, reason, action, note string) {
	if r.recorder != nil {
		r.recorder.Eventf(pool, nil, typ, reason, action, "%s", note)
	}
}

// forget drops all in-memory state of a pool that is gone.
func (r *Reconciler) forget(key string) {
	r.exp.Forget(key)
	r.members.forget(key)
	r.shaper.forget(key)
	r.mu.Lock()
	delete(r.notProgressing, key)
	delete(r.templateMissing, key)
	delete(r.lastStatusWrite, key)
	if uid, ok := r.poolUIDs[key]; ok {
		r.vetted.ForgetPool(uid)
		r.opts.Refills.Forget(uid)
		delete(r.poolUIDs, key)
	}
	r.mu.Unlock()
}

// poolsForTemplate maps a template event to the pools that use it.
func (r *Reconciler) poolsForTemplate(ctx context.Context, obj client.Object) []ctrl.Request {
	var pools extv1beta1.SandboxWarmPoolList
	if err := r.client.List(ctx, &pools, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{index.WarmPoolTemplate: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing pools of a template", "template", obj.GetName())
		return nil
	}
	out := make([]ctrl.Request, 0, len(pools.Items))
	for i := range pools.Items {
		out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&pools.Items[i])})
	}
	return out
}

// soonest returns the smallest positive duration, jittered by up to 50% so
// that many pools do not wake in lockstep; 0 if there is none.
func soonest(ds []time.Duration) time.Duration {
	var best time.Duration
	for _, d := range ds {
		if d > 0 && (best == 0 || d < best) {
			best = d
		}
	}
	if best == 0 {
		return 0
	}
	return wait.Jitter(best, 0.5)
}

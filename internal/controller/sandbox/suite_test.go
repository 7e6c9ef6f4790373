package sandbox

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// The suite runs the controller in a real manager against a real
// kube-apiserver, with a kubelet stand-in and the real garbage collector.
var (
	env        *testenv.Env
	k8s        client.Client
	writes     *testenv.WriteCounter
	reconciles atomic.Int64
	// watches can hold the manager's watch streams of a resource, so a
	// test can run passes against a cache that lags its own writes.
	watches = newWatchGates()
	// suiteReconciler is the controller under test, for checks of its
	// in-memory state (expectations left behind).
	suiteReconciler *Reconciler
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	// Under -short (make test-unit) nothing starts: the pure-logic tests run
	// and the rest skip in newNamespace.
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	k8s = env.Client
	gc, err := env.StartGarbageCollector()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer gc.Stop()
	kubelet, err := testenv.StartKubelet(env.Config, &testenv.Kubelet{Ready: func(p *corev1.Pod) bool {
		return p.Labels["test/not-ready"] == ""
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kubelet.Stop()

	writes = testenv.NewWriteCounter()
	cfg := watches.wrap(writes.Wrap(env.Config))
	cfg.QPS, cfg.Burst = -1, 1000
	mgr, err := manager.New(cfg, manager.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := setupCounted(mgr, Options{Workers: 20, StatusCoalesceWindow: 300 * time.Millisecond,
		// Only gVisor Pods are checkpointed (hibernate_integration_test.go);
		// every other test runs Pods without a RuntimeClass, unaffected.
		DeepHibernation: true, CheckpointTimeout: 2 * time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	// The children's informers must have synced before a test holds their
	// watches (watchGates): their initial list may itself be a watch.
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &corev1.PersistentVolumeClaim{}, &sandboxv1beta1.Sandbox{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "informer caches did not sync")
		return 1
	}
	return m.Run()
}

// setupCounted is SetupWithManager with a recorder around the reconciler,
// so tests can wait on the controller's own progress (a pass that saw a
// given state, the spacing of failed passes) instead of sleeping.
func setupCounted(mgr ctrl.Manager, opts Options) error {
	return newFromManager(mgr, opts).setup(mgr, func(r reconcile.Reconciler) reconcile.Reconciler {
		suiteReconciler, _ = r.(*Reconciler)
		return countingReconciler{inner: r, cache: mgr.GetClient()}
	})
}

// pass is one finished reconcile of one Sandbox.
type pass struct {
	start, end time.Time
	// sawRV is the Sandbox's resourceVersion in the informer cache just
	// before the pass ran: the pass read that state or a newer one. -1 when
	// the Sandbox was not in the cache.
	sawRV   int64
	failed  bool // returned an error (so was requeued with backoff)
	requeue bool // asked to run again after a delay
}

// passLogs holds the passes of every Sandbox, by namespace/name.
var passLogs sync.Map

type passLog struct {
	mu     sync.Mutex
	passes []pass
}

func passesOf(key types.NamespacedName) []pass {
	v, ok := passLogs.Load(key)
	if !ok {
		return nil
	}
	l := v.(*passLog)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pass(nil), l.passes...)
}

// countingReconciler wraps Reconcile to count and record passes.
type countingReconciler struct {
	inner reconcile.Reconciler
	cache client.Reader
}

func (c countingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	reconciles.Add(1)
	p := pass{start: time.Now(), sawRV: -1}
	var sb sandboxv1beta1.Sandbox
	if err := c.cache.Get(ctx, req.NamespacedName, &sb); err == nil {
		p.sawRV = mustRV(sb.ResourceVersion)
	}
	res, err := c.inner.Reconcile(ctx, req)
	p.end = time.Now()
	p.failed = err != nil
	p.requeue = res.RequeueAfter > 0 || res.Requeue //nolint:staticcheck // Requeue is deprecated but still honoured by controller-runtime.
	v, _ := passLogs.LoadOrStore(req.NamespacedName, &passLog{})
	l := v.(*passLog)
	l.mu.Lock()
	l.passes = append(l.passes, p)
	l.mu.Unlock()
	return res, err
}

// mustRV parses a resourceVersion. envtest's etcd hands out increasing
// integers; comparing them is a test-only shortcut (clients must treat
// resource versions as opaque).
func mustRV(rv string) int64 {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("resourceVersion %q is not an integer: %v", rv, err))
	}
	return n
}

// waitSettled waits until the controller is done with a Sandbox: its last
// finished pass neither failed nor asked for another, and every write to
// the Sandbox or its children (all named after it) since that pass began
// was made during it. The controller's own status writes do not trigger
// passes, so "a pass saw the current state" cannot be the test.
func waitSettled(t *testing.T, ns, name string) {
	t.Helper()
	key := types.NamespacedName{Namespace: ns, Name: name}
	eventually(t, 30*time.Second, "a settling pass of "+name, func() (bool, error) {
		ps := passesOf(key)
		if len(ps) == 0 {
			return false, fmt.Errorf("no pass yet")
		}
		last := ps[len(ps)-1]
		if last.failed || last.requeue {
			return false, fmt.Errorf("last pass failed=%v requeue=%v", last.failed, last.requeue)
		}
		for _, w := range writes.Writes() {
			if w.Name == name && w.At.After(last.start) && !w.At.Before(last.end) {
				return false, fmt.Errorf("%s %s after the last pass", w.Verb, w.Resource)
			}
		}
		return true, nil
	})
}

// ---- helpers ----

var nsCounter atomic.Int64

// newNamespace gives each test its own namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t)
	name := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%100000, nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return name
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// sandboxBuilder builds test Sandboxes fluently.
type sandboxBuilder struct{ sb *sandboxv1beta1.Sandbox }

func makeSandbox(ns, name string) *sandboxBuilder {
	return &sandboxBuilder{sb: &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			}},
		}},
	}}
}

func (b *sandboxBuilder) service(v bool) *sandboxBuilder { b.sb.Spec.Service = &v; return b }
func (b *sandboxBuilder) podLabels(kv ...string) *sandboxBuilder {
	if b.sb.Spec.PodTemplate.ObjectMeta.Labels == nil {
		b.sb.Spec.PodTemplate.ObjectMeta.Labels = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		b.sb.Spec.PodTemplate.ObjectMeta.Labels[kv[i]] = kv[i+1]
	}
	return b
}
func (b *sandboxBuilder) podAnnotations(kv ...string) *sandboxBuilder {
	if b.sb.Spec.PodTemplate.ObjectMeta.Annotations == nil {
		b.sb.Spec.PodTemplate.ObjectMeta.Annotations = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		b.sb.Spec.PodTemplate.ObjectMeta.Annotations[kv[i]] = kv[i+1]
	}
	return b
}
func (b *sandboxBuilder) ports(ports ...corev1.ContainerPort) *sandboxBuilder {
	b.sb.Spec.PodTemplate.Spec.Containers[0].Ports = ports
	return b
}
func (b *sandboxBuilder) suspended() *sandboxBuilder {
	b.sb.Spec.OperatingMode = sandboxv1beta1.OperatingModeSuspended
	return b
}
func (b *sandboxBuilder) shutdownAt(t time.Time, p sandboxv1beta1.ShutdownPolicy) *sandboxBuilder {
	mt := metav1.NewTime(t)
	b.sb.Spec.ShutdownTime = &mt
	b.sb.Spec.ShutdownPolicy = &p
	return b
}
func (b *sandboxBuilder) vct(name string) *sandboxBuilder {
	b.sb.Spec.VolumeClaimTemplates = append(b.sb.Spec.VolumeClaimTemplates, sandboxv1beta1.PersistentVolumeClaimTemplate{
		EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: mustQuantity("1Gi"),
			}},
		},
	})
	return b
}
func (b *sandboxBuilder) obj() *sandboxv1beta1.Sandbox { return b.sb }

func (b *sandboxBuilder) create(t *testing.T) *sandboxv1beta1.Sandbox {
	t.Helper()
	if err := k8s.Create(ctxT(t), b.sb); err != nil {
		t.Fatalf("creating sandbox: %v", err)
	}
	return b.sb
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
	}
}

// consistently checks that cond holds during d.
func consistently(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if !ok {
			t.Fatalf("%s stopped holding: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getSandbox(t *testing.T, ns, name string) *sandboxv1beta1.Sandbox {
	t.Helper()
	sb := &sandboxv1beta1.Sandbox{}
	if err := k8s.Get(ctxT(t), client.ObjectKey{Namespace: ns, Name: name}, sb); err != nil {
		t.Fatalf("getting sandbox: %v", err)
	}
	return sb
}

func condition(sb *sandboxv1beta1.Sandbox, typ string) *metav1.Condition {
	for i := range sb.Status.Conditions {
		if sb.Status.Conditions[i].Type == typ {
			return &sb.Status.Conditions[i]
		}
	}
	return nil
}

// waitCondition waits until the Sandbox's condition has status and reason.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) *sandboxv1beta1.Sandbox {
	t.Helper()
	var sb *sandboxv1beta1.Sandbox
	eventually(t, 30*time.Second, fmt.Sprintf("%s %s=%s/%s", name, typ, status, reason), func() (bool, error) {
		sb = &sandboxv1beta1.Sandbox{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sb); err != nil {
			return false, err
		}
		c := condition(sb, typ)
		if c == nil {
			return false, fmt.Errorf("no %s condition; have %+v", typ, sb.Status.Conditions)
		}
		return c.Status == status && c.Reason == reason, fmt.Errorf("have %s/%s %q", c.Status, c.Reason, c.Message)
	})
	return sb
}

func getPod(ns, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
	return p, err
}

func gone(obj client.Object) func() (bool, error) {
	return func() (bool, error) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
}

// eventsFor lists events.k8s.io Events about an object.
func eventsFor(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing events: %v", err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e)
		}
	}
	return out
}

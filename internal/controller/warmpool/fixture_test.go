package warmpool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// recordedEvent is one event a test recorder received.
type recordedEvent struct{ typ, reason, note string }

// fakeRecorder collects events in memory.
type fakeRecorder struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (f *fakeRecorder) Eventf(_ runtime.Object, _ runtime.Object, typ, reason, _ string, note string, args ...interface{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, recordedEvent{typ, reason, fmt.Sprintf(note, args...)})
}

func (f *fakeRecorder) byReason(reason string) []recordedEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recordedEvent
	for _, e := range f.events {
		if e.reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// fixture drives a pool Reconciler pass by pass against the real
// apiserver. Its client reads from a real informer cache; the pool's Sandbox
// event handler is wired to that informer (so expectations are lowered by
// real watch events) but reconciles only run when the test calls them.
type fixture struct {
	t      testing.TB
	r      *Reconciler
	c      client.Client
	ns     string
	writes *exttest.WriteCounter
	rec    *fakeRecorder
	now    time.Time
}

func newFixture(t testing.TB, opts Options) *fixture {
	t.Helper()
	testenv.SkipShort(t)
	f := &fixture{t: t, writes: &exttest.WriteCounter{}, rec: &fakeRecorder{}}
	mgr := exttest.NewPassManager(t, env, f.writes)
	f.r = NewReconciler(mgr.GetClient(), f.rec, opts)
	f.r.now = func() time.Time {
		if f.now.IsZero() {
			return time.Now()
		}
		return f.now
	}
	noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := ctrl.NewControllerManagedBy(mgr).Named("pool-events").
		Watches(&sandboxv1beta1.Sandbox{}, f.r.sandboxHandler()).Complete(noop); err != nil {
		t.Fatal(err)
	}
	mgr.Run()
	f.c = mgr.GetClient()
	f.ns = exttest.Namespace(t, env.Client, "pool")
	return f
}

func (f *fixture) key(pool string) string { return f.ns + "/" + pool }

func (f *fixture) reconcile(pool string) ctrl.Result {
	f.t.Helper()
	res, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: f.ns, Name: pool}})
	if err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// settle waits until the controller has observed its own writes: the
// expectations are satisfied and the cache lists what the apiserver has.
func (f *fixture) settle(pool string) {
	f.t.Helper()
	exttest.Eventually(f.t, 20*time.Second, func() error {
		if !f.r.exp.Satisfied(f.key(pool)) {
			c, d := f.r.exp.Pending(f.key(pool))
			return fmt.Errorf("expectations pending: %d creates, %d deletes", c, d)
		}
		cached, err := exttest.PoolMembers(f.c, f.ns, pool)
		if err != nil {
			return err
		}
		live, err := exttest.PoolMembers(env.Client, f.ns, pool)
		if err != nil {
			return err
		}
		if len(cached) != len(live) {
			return fmt.Errorf("cache has %d members, apiserver %d", len(cached), len(live))
		}
		for i := range live {
			found := false
			for j := range cached {
				if cached[j].UID == live[i].UID && cached[j].ResourceVersion == live[i].ResourceVersion {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("cache behind on %s", live[i].Name)
			}
		}
		return nil
	})
}

// converge reconciles and settles until a pass writes nothing to the pool's
// members.
func (f *fixture) converge(pool string) {
	f.t.Helper()
	for i := 0; i < 10; i++ {
		before := len(f.writes.Writes())
		f.reconcile(pool)
		f.settle(pool)
		n := 0
		for _, w := range f.writes.Writes()[before:] {
			if w.Resource == "sandboxes" {
				n++
			}
		}
		if n == 0 {
			return
		}
	}
	f.t.Fatal("pool did not converge in 10 passes")
}

func (f *fixture) members(pool string) []sandboxv1beta1.Sandbox {
	f.t.Helper()
	items, err := exttest.PoolMembers(env.Client, f.ns, pool)
	if err != nil {
		f.t.Fatal(err)
	}
	return items
}

func (f *fixture) pool(name string) *extv1beta1.SandboxWarmPool {
	f.t.Helper()
	var p extv1beta1.SandboxWarmPool
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &p); err != nil {
		f.t.Fatal(err)
	}
	return &p
}

func (f *fixture) edit(obj client.Object, fn func()) {
	f.t.Helper()
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		f.t.Fatal(err)
	}
	fn()
	if err := env.Client.Update(ctx, obj); err != nil {
		f.t.Fatal(err)
	}
	f.cached(obj)
}

// create creates objs through the apiserver and waits for the cache.
func (f *fixture) create(objs ...client.Object) {
	f.t.Helper()
	exttest.Create(f.t, env.Client, objs...)
	for _, o := range objs {
		f.cached(o)
	}
}

// cached waits until the informer cache holds obj's current version (or,
// for a deleted obj, nothing).
func (f *fixture) cached(obj client.Object) {
	f.t.Helper()
	want := obj.GetResourceVersion()
	exttest.Eventually(f.t, 10*time.Second, func() error {
		got := obj.DeepCopyObject().(client.Object)
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
			return err
		}
		if got.GetResourceVersion() != want {
			return fmt.Errorf("cache has %s at %s, want %s", obj.GetName(), got.GetResourceVersion(), want)
		}
		return nil
	})
}

func (f *fixture) markReady(sb *sandboxv1beta1.Sandbox) {
	f.t.Helper()
	if err := exttest.MarkSandboxReady(context.Background(), env.Client, sb, "10.0.0.9"); err != nil {
		f.t.Fatal(err)
	}
	f.cached(sb)
}

func (f *fixture) creates() int { return f.writes.Count("create", "sandboxes") }

// ownedBy reports whether sb's controller is the pool.
func ownedByPool(sb *sandboxv1beta1.Sandbox, pool *extv1beta1.SandboxWarmPool) bool {
	ref := metav1.GetControllerOf(sb)
	return ref != nil && ref.UID == pool.UID
}

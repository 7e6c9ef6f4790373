package claim

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// fixture drives the claim Reconciler pass by pass against the real
// apiserver, with a real informer cache whose Sandbox events feed the
// candidate queue. No other controller runs: the test plays the pool and
// the Sandbox controller by writing objects itself. funcs, when set,
// intercept the reconciler's client calls to inject conflicts and errors.
type fixture struct {
	t      *testing.T
	r      *Reconciler
	cached client.Client
	ns     string
	writes *exttest.WriteCounter
	funcs  interceptor.Funcs
	now    time.Time
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	testenv.SkipShort(t)
	f := &fixture{t: t, writes: &exttest.WriteCounter{}}
	mgr := exttest.NewPassManager(t, env, f.writes)
	f.cached = mgr.GetClient()
	// The interceptor reads f.funcs at call time, so tests can set it late.
	c := interceptor.NewClient(noWatch{mgr.GetClient()}, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if f.funcs.Get != nil {
				return f.funcs.Get(ctx, c, key, obj, opts...)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if f.funcs.Create != nil {
				return f.funcs.Create(ctx, c, obj, opts...)
			}
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if f.funcs.Patch != nil {
				return f.funcs.Patch(ctx, c, obj, p, opts...)
			}
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if f.funcs.SubResourcePatch != nil {
				return f.funcs.SubResourcePatch(ctx, c, sub, obj, p, opts...)
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	f.r = NewReconciler(c, mgr.GetAPIReader(), nil, opts)
	f.r.now = func() time.Time {
		if f.now.IsZero() {
			return time.Now()
		}
		return f.now
	}
	noop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	if err := ctrl.NewControllerManagedBy(mgr).Named("claim-feed").
		Watches(&sandboxv1beta1.Sandbox{}, f.r.candidateFeeder()).Complete(noop); err != nil {
		t.Fatal(err)
	}
	mgr.Run()
	f.ns = exttest.Namespace(t, env.Client, "claimfx")
	return f
}

// cached waits until the cache has obj at its current version.
func (f *fixture) cachedObj(obj client.Object) {
	f.t.Helper()
	want := obj.GetResourceVersion()
	exttest.Eventually(f.t, 10*time.Second, func() error {
		got := obj.DeepCopyObject().(client.Object)
		if err := f.cached.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
			return err
		}
		if got.GetResourceVersion() != want {
			return fmt.Errorf("cache behind on %s", obj.GetName())
		}
		return nil
	})
}

func (f *fixture) create(objs ...client.Object) {
	f.t.Helper()
	exttest.Create(f.t, env.Client, objs...)
	for _, o := range objs {
		f.cachedObj(o)
	}
}

// setup creates a template and a pool (strategy s) with no controller
// running; members are made with member().
func (f *fixture) setup(s extv1beta1.UpdateStrategyType) (*extv1beta1.SandboxTemplate, *extv1beta1.SandboxWarmPool) {
	f.t.Helper()
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	pool := exttest.NewPool(f.ns, "pool", "tmpl", 3)
	if s != "" {
		pool.Spec.UpdateStrategy = &extv1beta1.SandboxWarmPoolUpdateStrategy{Type: s}
	}
	f.create(tmpl, pool)
	return tmpl, pool
}

// member creates a pool member as the pool would, edited by edit, with the
// given readiness (ip "" = no pod IP yet).
func (f *fixture) member(name string, tmpl *extv1beta1.SandboxTemplate, pool *extv1beta1.SandboxWarmPool, ready bool, ip string, edit func(*sandboxv1beta1.Sandbox)) *sandboxv1beta1.Sandbox {
	f.t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name,
		Labels: map[string]string{
			labels.WarmPoolSandbox: labels.NameHash(pool.Name), labels.SandboxTemplateRefHash: labels.NameHash(tmpl.Name),
			labels.SandboxTemplateHash: blueprint.Hash(tmpl), labels.LaunchType: "warm",
		},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxWarmPool",
			Name: pool.Name, UID: pool.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
	}}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&sb.Spec.SandboxBlueprint)
	blueprint.ApplySecureDefaults(tmpl, &sb.Spec.PodTemplate.Spec)
	if edit != nil {
		edit(sb)
	}
	exttest.Create(f.t, env.Client, sb)
	if ip != "" {
		sb.Status.PodIPs = []string{ip}
	}
	if ready {
		if err := exttest.MarkSandboxReady(context.Background(), env.Client, sb, ip); err != nil {
			f.t.Fatal(err)
		}
	} else if ip != "" {
		if err := env.Client.Status().Update(context.Background(), sb); err != nil {
			f.t.Fatal(err)
		}
	}
	f.cachedObj(sb)
	// The feeder saw it when the cache did.
	return sb
}

func (f *fixture) claim(name string) *extv1beta1.SandboxClaim {
	f.t.Helper()
	c := exttest.NewClaim(f.ns, name, "pool")
	f.create(c)
	f.r.states.observe(client.ObjectKeyFromObject(c), c.UID, f.r.now())
	return c
}

func (f *fixture) reconcile(name string) (ctrl.Result, error) {
	f.t.Helper()
	return f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: f.ns, Name: name}})
}

func (f *fixture) mustReconcile(name string) ctrl.Result {
	f.t.Helper()
	res, err := f.reconcile(name)
	if err != nil {
		f.t.Fatalf("reconcile %s: %v", name, err)
	}
	return res
}

func (f *fixture) getClaim(name string) *extv1beta1.SandboxClaim {
	f.t.Helper()
	var c extv1beta1.SandboxClaim
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &c); err != nil {
		f.t.Fatal(err)
	}
	return &c
}

// bound returns the name of the Sandbox the claim's status names.
func (f *fixture) bound(name string) string { return f.getClaim(name).Status.SandboxStatus.Name }

func eventually(t *testing.T, cond func() error) {
	t.Helper()
	exttest.Eventually(t, 10*time.Second, cond)
}

// noWatch adapts the manager's client to the interceptor, which wants a
// WithWatch; the reconciler never watches through it.
type noWatch struct{ client.Client }

func (noWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("watch not supported")
}

// vouch records sb as a member the pool controller created, as the pool
// controller does right after its create.
func (f *fixture) vouch(pool *extv1beta1.SandboxWarmPool, tmpl *extv1beta1.SandboxTemplate, sb *sandboxv1beta1.Sandbox) *sandboxv1beta1.Sandbox {
	f.t.Helper()
	f.r.vetted.Record(pool.UID, sb.UID, blueprint.Hash(tmpl))
	return sb
}

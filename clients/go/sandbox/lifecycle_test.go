package sandbox

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// binder plays the claim and sandbox controllers in a namespace of the
// bare test apiserver: for each new claim it creates a Sandbox (Ready or
// not) and names it in the claim's status, unless told to leave claims
// unbound.
type binder struct {
	c      client.WithWatch
	ns     string
	ready  bool
	unbind bool
	// owned: the Sandbox carries the claim-uid label and a controller
	// reference to the claim, as the real controller's do.
	owned bool
	// statusDelay separates the Sandbox's writes from the claim's status
	// write, as the real controller's two writes are.
	statusDelay time.Duration
	mu          sync.Mutex
	bound       map[string]string // claim -> sandbox
}

func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sdk-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

func watchClient(t *testing.T) client.WithWatch {
	t.Helper()
	testenv.SkipShort(t)
	e := sharedEnv(t)
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startBinder runs a binder until the test ends.
func startBinder(t *testing.T, c client.WithWatch, ns string, ready, unbind bool) *binder {
	t.Helper()
	return runBinder(t, &binder{c: c, ns: ns, ready: ready, unbind: unbind})
}

// runBinder runs b until the test ends.
func runBinder(t *testing.T, b *binder) *binder {
	t.Helper()
	c, ns := b.c, b.ns
	b.bound = map[string]string{}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.Watch(ctx, &extv1beta1.SandboxClaimList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watching claims: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			claim, ok := ev.Object.(*extv1beta1.SandboxClaim)
			if !ok || ev.Type != watch.Added || b.unbind {
				continue
			}
			if err := b.bind(ctx, claim); err != nil && ctx.Err() == nil {
				t.Errorf("binding %s: %v", claim.Name, err)
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return b
}

func (b *binder) bind(ctx context.Context, claim *extv1beta1.SandboxClaim) error {
	name := "sb-" + claim.Name
	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns, Annotations: map[string]string{PodNameAnnotation: "pod-" + name}},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}}},
		}},
	}
	if b.owned {
		yes := true
		sb.Labels = map[string]string{claimUIDLabel: string(claim.UID)}
		sb.OwnerReferences = []metav1.OwnerReference{{APIVersion: extv1beta1.GroupVersion.String(), Kind: "SandboxClaim",
			Name: claim.Name, UID: claim.UID, Controller: &yes}}
	}
	if err := b.c.Create(ctx, sb); err != nil {
		return err
	}
	if err := setSandboxReady(ctx, b.c, b.ns, name, b.ready); err != nil {
		return err
	}
	if b.statusDelay > 0 {
		time.Sleep(b.statusDelay)
	}
	claim.Status.SandboxStatus.Name = name
	if err := b.c.Status().Update(ctx, claim); err != nil {
		return err
	}
	b.mu.Lock()
	b.bound[claim.Name] = name
	b.mu.Unlock()
	return nil
}

func setSandboxReady(ctx context.Context, c client.Client, ns, name string, ready bool) error {
	var sb sandboxv1beta1.Sandbox
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &sb); err != nil {
		return err
	}
	st, reason := metav1.ConditionFalse, "DependenciesNotReady"
	if ready {
		st, reason = metav1.ConditionTrue, "DependenciesReady"
	}
	sb.Status.PodIPs = []string{"fd00::5", "10.9.8.7"}
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: "Ready", Status: st, Reason: reason, Message: "pod says so"})
	return c.Status().Update(ctx, &sb)
}

func claimExists(t *testing.T, c client.Client, ns, name string) bool {
	t.Helper()
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &extv1beta1.SandboxClaim{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func listClaims(t *testing.T, c client.Client, ns string) []extv1beta1.SandboxClaim {
	t.Helper()
	var l extv1beta1.SandboxClaimList
	if err := c.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// eventually polls cond until it holds; the bound only stops a hung test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lifecycleOptions are handle options against the bare apiserver, sending
// sandbox requests to srv.
func lifecycleOptions(t *testing.T, ns string, srvURL string) Options {
	t.Helper()
	return Options{
		RestConfig: sharedEnv(t).Config, Namespace: ns, WarmPoolName: "pool", APIURL: srvURL, Quiet: true,
		SandboxReadyTimeout: time.Minute, CleanupTimeout: 10 * time.Second,
	}
}

func okServer(t *testing.T) (*recorder, string) {
	t.Helper()
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"stdout":"hi\n","stderr":"","exit_code":0}`)
	})
	return rec, srv.URL
}

func TestOpenWaitsForReadyByWatching(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	b := startBinder(t, c, ns, false, false)
	rec, url := okServer(t)
	o := lifecycleOptions(t, ns, url)
	// Record the SDK's API requests: the waits must be watches.
	apiReqs := recordAPI(&o)
	s, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() { opened <- s.Open(testCtx(t)) }()

	// The binder bound the claim to a not-Ready sandbox; Open must still
	// be waiting. Make it Ready and Open returns.
	var sbName string
	eventually(t, "claim bound", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, v := range b.bound {
			sbName = v
		}
		return sbName != ""
	})
	// Flip Ready only once the SDK watches the sandbox by name, so the
	// watch (not the initial list) must deliver it.
	eventually(t, "sandbox watched", func() bool {
		for _, r := range apiReqs() {
			if strings.Contains(r, "/sandboxes?fieldSelector=") && strings.Contains(r, "watch=true") {
				return true
			}
		}
		return false
	})
	select {
	case err := <-opened:
		t.Fatalf("Open returned before the sandbox was Ready: %v", err)
	default:
	}
	if err := setSandboxReady(testCtx(t), c, ns, sbName, true); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = s.Close(context.Background()) }()

	// This binder does not label its Sandboxes with the claim's UID, so
	// the pre-watch (label-selected list + watch) never sees it and the
	// wait by name (list + watch) finds it. The claim is never read: its
	// watch starts from the create response.
	reqs := apiReqs()
	var sbWatches, sbReads, preWatches, preLists, claimReads int
	for _, r := range reqs {
		switch {
		case strings.Contains(r, "/sandboxes?labelSelector=agents.x-k8s.io%2Fclaim-uid%3D"):
			if strings.Contains(r, "watch=true") {
				preWatches++
			} else {
				preLists++
			}
		case strings.Contains(r, "/sandboxes"):
			if strings.Contains(r, "watch=true") && strings.Contains(r, "fieldSelector=metadata.name%3D"+sbName) {
				sbWatches++
			} else {
				sbReads++
			}
		case strings.HasPrefix(r, "GET ") && strings.Contains(r, "/sandboxclaims") && !strings.Contains(r, "watch=true"):
			claimReads++
		}
	}
	if sbWatches != 1 || sbReads != 1 || preLists != 1 || preWatches != 1 || claimReads != 0 {
		t.Errorf("requests: sandbox by name %d watches, %d other (want 1 list + 1 watch); pre-watch %d lists, %d watches (want 1 + 1); %d claim reads (want 0): %v",
			sbWatches, sbReads, preLists, preWatches, claimReads, reqs)
	}

	if s.SandboxName() != sbName || s.PodName() != "pod-"+sbName || s.PodIP() != "10.9.8.7" ||
		s.Annotations()[PodNameAnnotation] != "pod-"+sbName || !s.IsReady() {
		t.Errorf("state: sandbox %q pod %q ip %q annotations %v", s.SandboxName(), s.PodName(), s.PodIP(), s.Annotations())
	}
	claims := listClaims(t, c, ns)
	if len(claims) != 1 {
		t.Fatalf("%d claims", len(claims))
	}
	cl := claims[0]
	if !strings.HasPrefix(cl.Name, "sandbox-claim-") || cl.Name != s.ClaimName() || cl.Spec.WarmPoolRef.Name != "pool" ||
		cl.Labels["agents.x-k8s.io/created-by"] != "go-client" || cl.Annotations["agents.x-k8s.io/client-first-requested-at"] == "" {
		t.Errorf("claim = %+v", cl.ObjectMeta)
	}
	if _, err := s.Run(testCtx(t), "echo hi"); err != nil {
		t.Fatal(err)
	}
	if r, _ := rec.req(0); r.Header.Get(HeaderSandboxID) != sbName || r.Header.Get(HeaderSandboxPodIP) != "10.9.8.7" {
		t.Errorf("routing headers %v", r.Header)
	}
	if err := s.Open(testCtx(t)); !errors.Is(err, ErrAlreadyOpen) {
		t.Errorf("second Open = %v, want ErrAlreadyOpen", err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if claimExists(t, c, ns, cl.Name) || s.ClaimName() != "" || s.IsReady() {
		t.Errorf("after Close: claim exists %v, name %q", claimExists(t, c, ns, cl.Name), s.ClaimName())
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// A claim deleted behind the handle's back: Close still succeeds.
	s2, _ := New(testCtx(t), lifecycleOptions(t, ns, url))
	go func() {
		eventually(t, "second claim", func() bool { return len(listClaims(t, c, ns)) == 1 })
		for _, cl := range listClaims(t, c, ns) {
			_ = setSandboxReady(testCtx(t), c, ns, "sb-"+cl.Name, true)
		}
	}()
	if err := s2.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(testCtx(t), &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s2.ClaimName()}}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(testCtx(t)); err != nil {
		t.Errorf("Close of an externally deleted claim = %v", err)
	}
}

func TestOpenFailuresRollBack(t *testing.T) {
	c := watchClient(t)
	_, url := okServer(t)

	t.Run("timeout reports conditions", func(t *testing.T) {
		ns := newNamespace(t, c)
		startBinder(t, c, ns, false, false)
		o := lifecycleOptions(t, ns, url)
		o.SandboxReadyTimeout = 2 * time.Second
		s, _ := New(testCtx(t), o)
		err := s.Open(testCtx(t))
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "Ready=False (DependenciesNotReady: pod says so)") {
			t.Fatalf("Open = %v, want ErrTimeout with the last conditions", err)
		}
		if n := len(listClaims(t, c, ns)); n != 0 || s.ClaimName() != "" {
			t.Errorf("%d claims left, handle claim %q", n, s.ClaimName())
		}
	})

	t.Run("sandbox deleted while waiting", func(t *testing.T) {
		ns := newNamespace(t, c)
		b := startBinder(t, c, ns, false, false)
		s, _ := New(testCtx(t), lifecycleOptions(t, ns, url))
		opened := make(chan error, 1)
		go func() { opened <- s.Open(testCtx(t)) }()
		var sb string
		eventually(t, "bound", func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, v := range b.bound {
				sb = v
			}
			return sb != ""
		})
		if err := c.Delete(testCtx(t), &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sb}}); err != nil {
			t.Fatal(err)
		}
		if err := <-opened; !errors.Is(err, ErrSandboxDeleted) {
			t.Fatalf("Open = %v, want ErrSandboxDeleted", err)
		}
		if n := len(listClaims(t, c, ns)); n != 0 {
			t.Errorf("%d claims left", n)
		}
	})

	t.Run("failed rollback keeps the claim", func(t *testing.T) {
		ns := newNamespace(t, c)
		startBinder(t, c, ns, false, false)
		var failDeletes atomic.Int32
		failDeletes.Store(1)
		ic := interceptor.NewClient(c, interceptor.Funcs{
			Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if failDeletes.Add(-1) >= 0 {
					return apierrors.NewServiceUnavailable("etcd is sad")
				}
				return cl.Delete(ctx, obj, opts...)
			},
		})
		h, err := NewK8sHelper(sharedEnv(t).Config, discardLogger())
		if err != nil {
			t.Fatal(err)
		}
		h.ExtensionsClient = ic
		o := lifecycleOptions(t, ns, url)
		o.K8sHelper = h
		o.SandboxReadyTimeout = time.Second
		s, _ := New(testCtx(t), o)
		err = s.Open(testCtx(t))
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrOrphanedClaim) {
			t.Fatalf("Open = %v, want ErrTimeout joined with ErrOrphanedClaim", err)
		}
		claim := s.ClaimName()
		if claim == "" || !claimExists(t, c, ns, claim) {
			t.Fatalf("claim %q not kept", claim)
		}
		if err := s.Open(testCtx(t)); !errors.Is(err, ErrOrphanedClaim) {
			t.Errorf("Open on an orphaned claim = %v", err)
		}
		if err := s.Close(testCtx(t)); err != nil {
			t.Fatalf("Close retrying the deletion: %v", err)
		}
		if claimExists(t, c, ns, claim) {
			t.Error("claim survived Close")
		}
	})

	t.Run("claim creation failure", func(t *testing.T) {
		o := lifecycleOptions(t, "no-such-namespace", url)
		s, _ := New(testCtx(t), o)
		if err := s.Open(testCtx(t)); !errors.Is(err, ErrClaimFailed) {
			t.Errorf("Open = %v, want ErrClaimFailed", err)
		}
	})
}

func TestCloseCancelsBlockedOpen(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	startBinder(t, c, ns, false, true) // never binds
	_, url := okServer(t)
	s, _ := New(testCtx(t), lifecycleOptions(t, ns, url))
	opened := make(chan error, 1)
	go func() { opened <- s.Open(testCtx(t)) }()
	eventually(t, "claim created", func() bool { return len(listClaims(t, c, ns)) == 1 })

	// A second Open queues behind the first; a cancelled context gets it
	// out at once.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Open(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with cancelled ctx = %v", err)
	}

	// Close with an already-cancelled context: cleanup is detached.
	if err := s.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-opened; err == nil {
		t.Fatal("cancelled Open succeeded")
	}
	eventually(t, "claim deleted", func() bool { return len(listClaims(t, c, ns)) == 0 })
}

func TestCloseDrainsInFlightOperations(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	startBinder(t, c, ns, true, false)
	arrived := make(chan struct{})
	release := make(chan struct{})
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		close(arrived)
		<-release
		_, _ = w.Write([]byte("late but complete"))
	})
	s, _ := New(testCtx(t), lifecycleOptions(t, ns, srv.URL))
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	claim := s.ClaimName()
	read := make(chan error, 1)
	go func() {
		b, err := s.Read(testCtx(t), "f")
		if err == nil && string(b) != "late but complete" {
			err = errors.New("truncated: " + string(b))
		}
		read <- err
	}()
	<-arrived
	closed := make(chan error, 1)
	go func() { closed <- s.Close(context.Background()) }()
	// New operations are refused while Close drains.
	eventually(t, "handle not ready", func() bool { return !s.IsReady() })
	if _, err := s.Exists(testCtx(t), "f"); !errors.Is(err, ErrNotReady) {
		t.Errorf("op during Close = %v, want ErrNotReady", err)
	}
	close(release)
	if err := <-read; err != nil {
		t.Errorf("in-flight Read cut by Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if claimExists(t, c, ns, claim) {
		t.Error("claim survived Close")
	}
}

func TestDisconnectAndReconnect(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	b := startBinder(t, c, ns, true, false)
	_, url := okServer(t)
	s, _ := New(testCtx(t), lifecycleOptions(t, ns, url))
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	claim, sb := s.ClaimName(), s.SandboxName()
	if err := s.Disconnect(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if !claimExists(t, c, ns, claim) || s.IsReady() {
		t.Fatal("Disconnect deleted the claim or stayed ready")
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	if s.ClaimName() != claim || s.SandboxName() != sb || len(listClaims(t, c, ns)) != 1 {
		t.Errorf("reconnect made a new claim: %q/%q", s.ClaimName(), s.SandboxName())
	}
	if _, err := s.Run(testCtx(t), "true"); err != nil {
		t.Errorf("Run after reconnect: %v", err)
	}

	// Sandbox not Ready: the claim is orphaned until it recovers.
	_ = s.Disconnect(testCtx(t))
	if err := setSandboxReady(testCtx(t), c, ns, sb, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); !errors.Is(err, ErrOrphanedClaim) {
		t.Errorf("reconnect to a not-Ready sandbox = %v, want ErrOrphanedClaim", err)
	}
	if s.ClaimName() != claim {
		t.Error("identity lost on a failed reconnect")
	}

	// Claim gone: the handle forgets it.
	if err := c.Delete(testCtx(t), &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); !errors.Is(err, ErrSandboxDeleted) {
		t.Errorf("reconnect to a deleted claim = %v, want ErrSandboxDeleted", err)
	}
	if s.ClaimName() != "" {
		t.Error("identity kept after the claim was deleted")
	}
	_ = b
}

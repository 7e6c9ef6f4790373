package sandbox

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// recordAPI makes o's Kubernetes clients record every request as
// "METHOD path?query".
func recordAPI(o *Options) func() []string {
	var mu sync.Mutex
	var reqs []string
	o.RestConfig = rest.CopyConfig(o.RestConfig)
	o.RestConfig.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			reqs = append(reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), reqs...)
	}
}

// With a controller that labels the claimed Sandbox with the claim's UID
// and makes the claim its controller (as adoption does), Open takes the
// Sandbox from its pre-watch: no list or watch by name, no read of the
// claim, just the create, the claim watch and the pre-watch. (The binder
// writes the claim status a little after the Sandbox, like the real
// controller; with no gap the wait by name may win the race, which is
// only one request more.)
func TestOpenTakesTheClaimedSandboxFromThePrewatch(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	runBinder(t, &binder{c: c, ns: ns, ready: true, owned: true, statusDelay: 300 * time.Millisecond})
	// A fresh apiserver answers lists from its Sandbox cache (what the
	// pre-watch asks for) only once that cache is up.
	eventually(t, "sandbox cache up", func() bool {
		ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
		defer cancel()
		return c.List(ctx, &sandboxv1beta1.SandboxList{}, client.InNamespace(ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}) == nil
	})
	_, url := okServer(t)
	o := lifecycleOptions(t, ns, url)
	reqs := recordAPI(&o)
	s, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(testCtx(t)); err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	var byName, preLists, preWatches, claimReads int
	for _, r := range reqs() {
		switch {
		case strings.Contains(r, "/sandboxes?labelSelector=agents.x-k8s.io%2Fclaim-uid%3D"):
			if strings.Contains(r, "watch=true") {
				preWatches++
			} else {
				preLists++
			}
		case strings.Contains(r, "/sandboxes"):
			byName++
		case strings.HasPrefix(r, "GET ") && strings.Contains(r, "/sandboxclaims") && !strings.Contains(r, "watch=true"):
			claimReads++
		}
	}
	if byName != 0 || preLists != 1 || claimReads != 0 {
		t.Errorf("requests: %d sandbox requests by name (want 0), pre-watch %d lists %d watches, %d claim reads (want 0): %v",
			byName, preLists, preWatches, claimReads, reqs())
	}
	sb := "sb-" + s.ClaimName()
	if s.SandboxName() != sb || s.PodName() != "pod-"+sb || s.PodIP() != "10.9.8.7" || s.Annotations()[PodNameAnnotation] != "pod-"+sb {
		t.Errorf("state: sandbox %q pod %q ip %q annotations %v", s.SandboxName(), s.PodName(), s.PodIP(), s.Annotations())
	}
	if _, err := s.Run(testCtx(t), "echo hi"); err != nil {
		t.Fatal(err)
	}
}

// The pre-watch answers only for the Sandbox the claim's status named,
// Ready, not being deleted and controlled by the claim: a Sandbox that
// merely carries the claim's UID label (anyone who may create Sandboxes
// could plant one) is never taken.
func TestPrewatchAnswersOnlyForTheClaimedSandbox(t *testing.T) {
	const uid = types.UID("claim-uid-1")
	yes := true
	mk := func(name string, ready bool, owner types.UID, kind string) *sandboxv1beta1.Sandbox {
		sb := sbObj(name, ready)
		sb.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: "claim", UID: owner, Controller: &yes}}
		return sb
	}
	deleting := mk("deleting", true, uid, "SandboxClaim")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pw := &sandboxPrewatch{uid: uid, changed: make(chan struct{}), seen: map[string]*sandboxv1beta1.Sandbox{
		"good":      mk("good", true, uid, "SandboxClaim"),
		"not-ready": mk("not-ready", false, uid, "SandboxClaim"),
		"foreign":   mk("foreign", true, "someone-else", "SandboxClaim"),
		"pool":      mk("pool", true, uid, "SandboxWarmPool"),
		"deleting":  deleting,
	}}
	for name, want := range map[string]bool{"good": true, "not-ready": false, "foreign": false, "pool": false, "deleting": false, "absent": false} {
		got, ch := pw.ready(name)
		if (got != nil) != want {
			t.Errorf("ready(%q) = %v, want found %v", name, got, want)
		}
		if !want && ch == nil {
			t.Errorf("ready(%q): no change channel from a running pre-watch", name)
		}
	}

	// A waiter wakes at the change that makes its Sandbox Ready.
	_, ch := pw.ready("not-ready")
	go pw.update(func() {
		cur := pw.seen["not-ready"]
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "R"})
	})
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up")
	}
	if got, _ := pw.ready("not-ready"); got == nil {
		t.Error("not taken once Ready")
	}

	// A stopped pre-watch (and none at all) leave the wait by name alone.
	pw.update(func() { pw.stopped = true })
	if got, ch := pw.ready("absent"); got != nil || ch != nil {
		t.Errorf("stopped pre-watch: %v, %v", got, ch)
	}
	var none *sandboxPrewatch
	if got, ch := none.ready("good"); got != nil || ch != nil {
		t.Errorf("nil pre-watch: %v, %v", got, ch)
	}
}

// The transport of router modes is set up while the claim is being bound;
// when it fails, Open fails at once (not after SandboxReadyTimeout) and
// the claim is rolled back.
func TestEarlyTransportFailureEndsOpenAtOnce(t *testing.T) {
	c := watchClient(t)
	ns := newNamespace(t, c)
	startBinder(t, c, ns, false, true) // never binds
	o := lifecycleOptions(t, ns, "")
	o.APIURL = ""                       // router tunnel: no sandbox-router-svc here
	o.SandboxReadyTimeout = time.Minute // the failure must not wait for this
	s, err := New(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Open(testCtx(t))
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), RouterServiceName) {
		t.Fatalf("Open = %v, want the router lookup's ErrNotReady", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Open took %s to report a transport failure", d)
	}
	if n := len(listClaims(t, c, ns)); n != 0 || s.ClaimName() != "" {
		t.Errorf("%d claims left, handle claim %q", n, s.ClaimName())
	}
}

// An unthrottled rest config gets the SDK's rate limit, on a copy.
func TestNewK8sHelperRaisesTheDefaultRateLimit(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	h, err := NewK8sHelper(cfg, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if h.RestConfig.QPS != DefaultClientQPS || h.RestConfig.Burst != DefaultClientBurst || cfg.QPS != 0 || cfg.Burst != 0 {
		t.Errorf("helper QPS %v burst %d; caller's config QPS %v burst %d", h.RestConfig.QPS, h.RestConfig.Burst, cfg.QPS, cfg.Burst)
	}
	set := &rest.Config{Host: "https://127.0.0.1:1", QPS: 3, Burst: 4}
	if h, err = NewK8sHelper(set, discardLogger()); err != nil || h.RestConfig.QPS != 3 || h.RestConfig.Burst != 4 {
		t.Errorf("an explicit limit was changed: %v %v", h.RestConfig, err)
	}
}

func TestRouterNamespaces(t *testing.T) {
	for _, tc := range []struct {
		ns, option string
		want       []string
	}{
		{"team-a", "", []string{"team-a", DefaultRouterNamespace}},
		{DefaultRouterNamespace, "", []string{DefaultRouterNamespace}},
		{"team-a", "routers", []string{"routers"}},
	} {
		o := Options{Namespace: tc.ns, RouterNamespace: tc.option}
		if got := routerNamespaces(&o); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("namespace %q option %q: %v, want %v", tc.ns, tc.option, got, tc.want)
		}
	}
	if o := (Options{RouterNamespace: "Not_A_Namespace"}).withDefaults(); o.validate() == nil {
		t.Error("an invalid RouterNamespace was accepted")
	}
}

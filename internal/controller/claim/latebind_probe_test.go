package claim

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

func TestVerdictCache(t *testing.T) {
	c := newVerdictCache()
	t0 := time.Unix(100, 0)
	if c.get("a") != verdictUnknown {
		t.Fatal("fresh cache knows a verdict")
	}
	if !c.want("a", "ns/p", "10.0.0.1", t0) || c.get("a") != verdictPending {
		t.Fatal("first sight of a Ready member does not ask for a probe")
	}
	if c.want("a", "ns/p", "10.0.0.1", t0) {
		t.Fatal("a pending probe is asked for twice")
	}
	if c.record("a", "10.0.0.9", true, "") || c.get("a") != verdictPending {
		t.Fatal("a probe of another address settled the verdict")
	}
	if !c.record("a", "10.0.0.1", true, "") || c.get("a") != verdictYes {
		t.Fatal("positive probe not recorded")
	}
	if c.record("a", "10.0.0.1", false, "late") || c.get("a") != verdictYes {
		t.Fatal("a settled verdict was overwritten without a new probe")
	}
	// A positive verdict survives a new Ready transition at the same
	// address; a new address asks again.
	if c.want("a", "ns/p", "10.0.0.1", t0.Add(time.Minute)) {
		t.Fatal("positive verdict re-probed on a Ready transition")
	}
	if !c.want("a", "ns/p", "10.0.0.2", t0) || c.get("a") != verdictPending {
		t.Fatal("new address not re-probed")
	}
	// A negative verdict is re-examined on the next Ready transition only.
	c.want("b", "ns/p", "10.0.0.3", t0)
	c.record("b", "10.0.0.3", false, "refused")
	if c.get("b") != verdictNo || c.want("b", "ns/p", "10.0.0.3", t0) {
		t.Fatal("negative verdict re-probed without a new Ready transition")
	}
	if !c.want("b", "ns/p", "10.0.0.3", t0.Add(time.Second)) {
		t.Fatal("negative verdict not re-probed after a new Ready transition")
	}
	// stop drops a pending probe only; forget drops everything.
	c.stop("b")
	if c.get("b") != verdictUnknown {
		t.Fatal("stop kept a pending probe")
	}
	c.want("d", "ns/p", "10.0.0.4", t0)
	c.record("d", "10.0.0.4", true, "")
	c.stop("d")
	if c.get("d") != verdictYes {
		t.Fatal("stop dropped a settled verdict")
	}
	c.forget("d")
	if c.get("d") != verdictUnknown {
		t.Fatal("forget kept the verdict")
	}
	if _, _, ok := c.target("d"); ok {
		t.Fatal("forgotten member still has a probe target")
	}
}

// testProber runs the workers against a scripted probe function.
func testProber(t *testing.T, probe func(ip string, attempt int) (*latebind.State, error)) (*prober, chan []types.NamespacedName) {
	t.Helper()
	woken := make(chan []types.NamespacedName, 16)
	var mu sync.Mutex
	attempts := map[string]int{}
	p := &prober{
		cache: newVerdictCache(),
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](time.Millisecond, 5*time.Millisecond)),
		probe: func(_ context.Context, ip string) (*latebind.State, error) {
			mu.Lock()
			attempts[ip]++
			n := attempts[ip]
			mu.Unlock()
			return probe(ip, n)
		},
		keyID:   "k1",
		waiters: map[string]map[types.NamespacedName]struct{}{},
		wake:    func(k []types.NamespacedName) { woken <- k },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, woken
}

func waitVerdict(t *testing.T, p *prober, uid types.UID, want verdict) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.verdict(uid) != want {
		if time.Now().After(deadline) {
			t.Fatalf("verdict of %s = %v, want %v", uid, p.verdict(uid), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestProberVerdicts(t *testing.T) {
	p, woken := testProber(t, func(ip string, attempt int) (*latebind.State, error) {
		switch ip {
		case "ok":
			return &latebind.State{KeyID: "k1"}, nil
		case "late": // sandboxd binds its port after two refusals
			if attempt < 3 {
				return nil, errors.New("connection refused")
			}
			return &latebind.State{KeyID: "k1"}, nil
		case "otherkey":
			return &latebind.State{KeyID: "k2"}, nil
		case "bound":
			return &latebind.State{KeyID: "k1", Bound: true}, nil
		}
		return nil, errors.New("connection refused")
	})
	p.waitFor("ns/p", types.NamespacedName{Namespace: "ns", Name: "c1"})
	for _, ip := range []string{"ok", "late", "otherkey", "bound", "nothing"} {
		p.cache.want(types.UID(ip), "ns/p", ip, time.Unix(1, 0))
		p.queue.Add(types.UID(ip))
	}
	waitVerdict(t, p, "ok", verdictYes)
	waitVerdict(t, p, "late", verdictYes)
	waitVerdict(t, p, "otherkey", verdictNo)
	waitVerdict(t, p, "bound", verdictNo)
	// Nothing listening: gives up after probeAttempts, no more.
	waitVerdict(t, p, "nothing", verdictNo)
	select {
	case k := <-woken:
		if len(k) != 1 || k[0].Name != "c1" {
			t.Fatalf("woke %v", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim was not woken by a verdict")
	}
}

func TestProberGivesUpAfterAttempts(t *testing.T) {
	var mu sync.Mutex
	n := 0
	p, _ := testProber(t, func(string, int) (*latebind.State, error) {
		mu.Lock()
		n++
		mu.Unlock()
		return nil, errors.New("connection refused")
	})
	p.cache.want("x", "ns/p", "x", time.Unix(1, 0))
	p.queue.Add("x")
	waitVerdict(t, p, "x", verdictNo)
	mu.Lock()
	defer mu.Unlock()
	if n != probeAttempts {
		t.Fatalf("%d probes, want %d", n, probeAttempts)
	}
}

// A member that stops being Ready while its probe retries is not probed
// further and gets no verdict.
func TestProberStopsWhenNotReady(t *testing.T) {
	p, _ := testProber(t, func(string, int) (*latebind.State, error) { return nil, errors.New("refused") })
	p.cache.want("y", "ns/p", "y", time.Unix(1, 0))
	p.cache.stop("y")
	p.queue.Add("y")
	deadline := time.Now().Add(2 * time.Second)
	for p.queue.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if v := p.verdict("y"); v != verdictUnknown {
		t.Fatalf("verdict %v for a member no longer Ready", v)
	}
}

package claim

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// Probing warm members for late binding. A member's spec carrying the
// controller's key says only that the pool injected it (it injects into the
// first container of every template that allows env); whether that
// container runs a sandboxd that trusts the key (and not nginx, jupyterlab
// or busybox) only the container can tell. So when a member turns Ready
// the prober asks its sandboxd (GET latebind.Path) for the fingerprint of
// the key it trusts, off the claim's critical path, and records the verdict
// by Sandbox UID in memory. An env claim adopts only members with a
// positive verdict; every other member stays in the pool for claims
// without env. The verdict is a performance hint, never a trust decision:
// the answer is unauthenticated, vetting (by the pool's UID) still decides
// which Sandboxes may be adopted at all, and a lying member only earns a
// delivery that fails and is bounded (deliveryDeadline). Nothing is
// written to the API; after a restart the informer's initial list replays
// every Ready member, which probes it again.
const (
	// probeTimeout bounds one GET: sandboxd answers from memory, so a
	// second is plenty even on a loaded node, and a member that does not
	// answer within it does not serve a claim quickly either.
	probeTimeout = time.Second
	// probeAttempts, with the backoff below, give a sandboxd that is
	// still binding its port a few seconds after its Pod turned Ready.
	probeAttempts  = 5
	probeBaseDelay = 200 * time.Millisecond
	probeMaxDelay  = 2 * time.Second
	// probeWorkers bounds concurrent probes: a pool refill turning many
	// members Ready at once queues them rather than opening a connection
	// per member.
	probeWorkers = 4
)

// verdict is what the prober knows about a member.
type verdict int

const (
	verdictUnknown verdict = iota
	// verdictPending: a probe is queued or running.
	verdictPending
	// verdictYes: the member's sandboxd trusts this controller's key.
	verdictYes
	// verdictNo: nothing, or something else, answered.
	verdictNo
)

// verdictEntry is the verdict for one member at one address, since one
// Ready transition.
type verdictEntry struct {
	v     verdict
	ip    string
	since time.Time
	pool  string
	why   string
}

// verdictCache holds verdicts by Sandbox UID. A positive verdict holds for
// the member's life at its address (what runs in its container does not
// change); a negative one is re-examined on the member's next Ready
// transition (its sandboxd may have come up late).
type verdictCache struct {
	mu sync.Mutex
	m  map[types.UID]*verdictEntry
}

func newVerdictCache() *verdictCache { return &verdictCache{m: map[types.UID]*verdictEntry{}} }

// want reports whether the member needs a probe, and if so marks it
// pending.
func (c *verdictCache) want(uid types.UID, pool, ip string, since time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[uid]; ok && e.ip == ip && (e.v != verdictNo || e.since.Equal(since)) {
		return false
	}
	c.m[uid] = &verdictEntry{v: verdictPending, ip: ip, since: since, pool: pool}
	return true
}

// target returns the address a pending probe is for.
func (c *verdictCache) target(uid types.UID) (ip, pool string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[uid]
	if !ok || e.v != verdictPending {
		return "", "", false
	}
	return e.ip, e.pool, true
}

// record settles a pending probe of uid at ip; a probe overtaken by a
// newer target (another address) or a forgotten member changes nothing.
func (c *verdictCache) record(uid types.UID, ip string, ok bool, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.m[uid]
	if !found || e.v != verdictPending || e.ip != ip {
		return false
	}
	e.v, e.why = verdictNo, why
	if ok {
		e.v = verdictYes
	}
	return true
}

// get returns the verdict of uid.
func (c *verdictCache) get(uid types.UID) verdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[uid]; ok {
		return e.v
	}
	return verdictUnknown
}

// stop drops a pending probe (the member is no longer Ready: retries end);
// settled verdicts stay.
func (c *verdictCache) stop(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[uid]; ok && e.v == verdictPending {
		delete(c.m, uid)
	}
}

func (c *verdictCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// prober runs the probes with a bounded worker pool fed by the candidate
// feed (observe), and wakes the env claims that wait for a verdict.
type prober struct {
	cache *verdictCache
	queue workqueue.TypedRateLimitingInterface[types.UID]
	// probe asks the sandboxd at ip for its State.
	probe func(ctx context.Context, ip string) (*latebind.State, error)
	keyID string

	mu sync.Mutex
	// waiters: per pool, the env claims that skipped a member whose
	// verdict was pending; a verdict of that pool wakes them.
	waiters map[string]map[types.NamespacedName]struct{}
	wake    func([]types.NamespacedName)
}

// newProber returns nil when late binding is off.
func newProber(lb *LateBinding, wake func([]types.NamespacedName)) *prober {
	if !lb.enabled() {
		return nil
	}
	hc := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	port := lb.Port
	return &prober{
		cache: newVerdictCache(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](probeBaseDelay, probeMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "late-binding-probe"}),
		probe: func(ctx context.Context, ip string) (*latebind.State, error) {
			return latebind.Probe(ctx, hc, ip, port)
		},
		keyID:   lb.Signer.KeyID(),
		waiters: map[string]map[types.NamespacedName]struct{}{},
		wake:    wake,
	}
}

// observe is the candidate feed's hook for every event of a pool member:
// a Ready member with an address whose spec carries the key gets probed
// (once per address and Ready transition), one that is not Ready stops
// being probed. It never blocks.
func (p *prober) observe(sb *sandboxv1beta1.Sandbox, pool, key string) {
	if p == nil {
		return
	}
	ready := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if sb.DeletionTimestamp != nil || ready == nil || ready.Status != metav1.ConditionTrue || len(sb.Status.PodIPs) == 0 || !carriesKey(sb, key) {
		p.cache.stop(sb.UID)
		return
	}
	if p.cache.want(sb.UID, pool, sb.Status.PodIPs[0], ready.LastTransitionTime.Time) {
		p.queue.Forget(sb.UID)
		p.queue.Add(sb.UID)
	}
}

// forget drops a deleted member.
func (p *prober) forget(uid types.UID) {
	if p != nil {
		p.cache.forget(uid)
	}
}

// verdict of a member (verdictUnknown without a prober).
func (p *prober) verdict(uid types.UID) verdict {
	if p == nil {
		return verdictUnknown
	}
	return p.cache.get(uid)
}

// carriesKey: some container of the member's spec trusts key; members
// without it are never late-bound, so they are not probed.
func carriesKey(sb *sandboxv1beta1.Sandbox, key string) bool {
	for i := range sb.Spec.PodTemplate.Spec.Containers {
		for _, e := range sb.Spec.PodTemplate.Spec.Containers[i].Env {
			if e.Name == latebind.KeyEnv && e.ValueFrom == nil && e.Value == key {
				return true
			}
		}
	}
	return false
}

// waitFor registers an env claim to be woken by the pool's next verdict.
func (p *prober) waitFor(pool string, claim types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiters[pool] == nil {
		p.waiters[pool] = map[types.NamespacedName]struct{}{}
	}
	p.waiters[pool][claim] = struct{}{}
}

func (p *prober) settled(pool string) {
	p.mu.Lock()
	ws := p.waiters[pool]
	delete(p.waiters, pool)
	p.mu.Unlock()
	keys := make([]types.NamespacedName, 0, len(ws))
	for k := range ws {
		keys = append(keys, k)
	}
	if len(keys) > 0 && p.wake != nil {
		p.wake(keys)
	}
}

// Start runs the workers until ctx ends (a manager Runnable).
func (p *prober) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range probeWorkers {
		wg.Go(func() {
			for p.work(ctx) {
			}
		})
	}
	<-ctx.Done()
	p.queue.ShutDown()
	wg.Wait()
	return nil
}

// work probes one member; false once the queue is shut down.
func (p *prober) work(ctx context.Context) bool {
	uid, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(uid)
	ip, pool, ok := p.cache.target(uid)
	if !ok {
		p.queue.Forget(uid) // settled, no longer Ready, or deleted
		return true
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	st, err := p.probe(pctx, ip)
	cancel()
	var yes bool
	var why string
	switch {
	case err != nil && p.queue.NumRequeues(uid) < probeAttempts-1 && ctx.Err() == nil:
		p.queue.AddRateLimited(uid)
		return true
	case err != nil:
		why = err.Error()
	case st.KeyID != p.keyID:
		why = fmt.Sprintf("sandboxd trusts key %q, not this controller's %q", st.KeyID, p.keyID)
	case st.Bound:
		why = "sandboxd is already bound to a claim"
	default:
		yes = true
	}
	p.queue.Forget(uid)
	if p.cache.record(uid, ip, yes, why) {
		p.settled(pool)
	}
	return true
}

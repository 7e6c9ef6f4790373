package router

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// SandboxKey names a Sandbox.
type SandboxKey struct {
	Namespace string
	Name      string
}

func (k SandboxKey) String() string { return k.Namespace + "/" + k.Name }

// SandboxRecord is the part of a Sandbox object that routing depends on. The
// informer adapter (informer.go) extracts it; keeping the index on these
// small records lets its logic be tested without an apiserver.
type SandboxRecord struct {
	Key             SandboxKey
	UID             string
	ResourceVersion string
	Deleting        bool
	Suspended       bool // spec.operatingMode == Suspended
	// NoAutoResume: the Sandbox opts out of being woken by traffic
	// (AutoResumeAnnotation "false"), e.g. suspended for cost or quarantine.
	NoAutoResume bool
	Ready        bool // condition Ready == True
	ReadySince   time.Time
	ReadyReason  string
	PodIPs       []string // status.podIPs
	WarmPool     bool     // still an unclaimed warm-pool member
	Ports        []uint16 // TCP ports declared by the pod template
	LastActivity time.Time
}

// PodRecord is the part of a Pod that routing depends on.
type PodRecord struct {
	Namespace string
	Name      string
	UID       string
	// OwnerUID is the UID of the controlling Sandbox (a controller
	// ownerReference of Kind Sandbox in a served version); empty if none.
	// It only ever matches a Sandbox of the pod's own namespace.
	OwnerUID string
	Deleting bool
	Ready    bool // phase Running and condition Ready == True
	PodIPs   []string
}

// Ready reasons after which waiting is pointless: the controller will not
// bring the sandbox up without a user action.
var terminalReasons = map[string]bool{
	"SandboxExpired": true,
	"PodSucceeded":   true,
	"PodFailed":      true,
}

// Snapshot is the immutable routing view of one sandbox, recomputed on every
// change of the Sandbox or of a Pod it owns, so the request path only does a
// map read.
type Snapshot struct {
	Key             SandboxKey
	Exists          bool
	UID             string
	ResourceVersion string
	Deleting        bool
	Suspended       bool
	NoAutoResume    bool
	WarmPool        bool
	Routable        bool
	// Terminal is set when the sandbox cannot become routable by waiting.
	Terminal bool
	// Reason explains why the sandbox is not routable (client-visible).
	Reason string
	// Addrs are the verified addresses of the current pod, IPv4 first.
	Addrs []netip.Addr
	// History holds addresses earlier pods of this sandbox had, so a stale
	// X-Sandbox-Pod-IP hint after a resume is recognised rather than refused.
	History      []netip.Addr
	Ports        []uint16
	LastActivity time.Time
	// ReadySince is when the sandbox last became Ready; idle time is counted
	// from it too, so a freshly resumed sandbox is not suspended at once.
	ReadySince time.Time
}

// AllowsPort reports whether port is declared by the sandbox or always open.
func (s *Snapshot) AllowsPort(port uint16, always []uint16) bool {
	return slices.Contains(s.Ports, port) || slices.Contains(always, port)
}

const historyLen = 8

// ownerKey names a Sandbox by namespace and UID. Pods are tied to their
// Sandbox by this pair, never by the UID alone: an ownerReference is written
// by whoever creates the pod, so a tenant of namespace B can copy the UID of
// namespace A's Sandbox into a pod of B. The Sandbox controller only counts
// pods of the Sandbox's own namespace (owner references cannot cross
// namespaces), and the router must count exactly the same pods.
type ownerKey struct {
	Namespace string
	UID       string
}

func podOwner(p *PodRecord) ownerKey { return ownerKey{Namespace: p.Namespace, UID: p.OwnerUID} }

// Index holds the routing state fed by informers. It implements Resolver.
type Index struct {
	mu          sync.RWMutex
	sandboxes   map[SandboxKey]*SandboxRecord
	uidKey      map[ownerKey]SandboxKey
	pods        map[string]*PodRecord              // pod UID -> record
	podsByOwner map[ownerKey]map[string]*PodRecord // sandbox (ns, UID) -> pod UID -> record
	ipPods      map[netip.Addr]map[string]bool     // address -> pod UIDs holding it
	snaps       map[SandboxKey]*Snapshot
	history     map[SandboxKey][]netip.Addr
	namespaces  map[string]int // sandboxes per namespace

	notify notifier
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		sandboxes:   map[SandboxKey]*SandboxRecord{},
		uidKey:      map[ownerKey]SandboxKey{},
		pods:        map[string]*PodRecord{},
		podsByOwner: map[ownerKey]map[string]*PodRecord{},
		ipPods:      map[netip.Addr]map[string]bool{},
		snaps:       map[SandboxKey]*Snapshot{},
		history:     map[SandboxKey][]netip.Addr{},
		namespaces:  map[string]int{},
		notify:      notifier{m: map[SandboxKey]*waitEntry{}},
	}
}

// Lookup returns the current snapshot for key; never nil.
func (x *Index) Lookup(key SandboxKey) *Snapshot {
	x.mu.RLock()
	s := x.snaps[key]
	x.mu.RUnlock()
	if s == nil {
		return &Snapshot{Key: key, Reason: "not found"}
	}
	return s
}

// KnownNamespace reports whether any sandbox lives in ns. Metrics use it to
// keep the namespace label bounded by real namespaces, not client input.
func (x *Index) KnownNamespace(ns string) bool {
	x.mu.RLock()
	n := x.namespaces[ns]
	x.mu.RUnlock()
	return n > 0
}

// AddrOwners lists the sandboxes whose cached pods hold address a.
func (x *Index) AddrOwners(a netip.Addr) []SandboxKey {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.keysHoldingLocked(a.Unmap())
}

// Subscribe returns a channel closed at the next change of key. Call it
// before Lookup so that a change between the two is not missed; release must
// be called when the caller stops waiting.
func (x *Index) Subscribe(key SandboxKey) (<-chan struct{}, func()) {
	return x.notify.subscribe(key)
}

// Range calls fn for every known sandbox snapshot.
func (x *Index) Range(fn func(*Snapshot)) {
	x.mu.RLock()
	snaps := make([]*Snapshot, 0, len(x.snaps))
	for _, s := range x.snaps {
		snaps = append(snaps, s)
	}
	x.mu.RUnlock()
	for _, s := range snaps {
		fn(s)
	}
}

// UpsertSandbox records the latest state of a Sandbox.
func (x *Index) UpsertSandbox(r *SandboxRecord) {
	x.mu.Lock()
	var affected []SandboxKey
	if old := x.sandboxes[r.Key]; old == nil {
		x.namespaces[r.Key.Namespace]++
	} else if old.UID != r.UID {
		// Same name, new incarnation: the old UID's pods no longer belong here.
		delete(x.uidKey, ownerKey{r.Key.Namespace, old.UID})
	}
	x.sandboxes[r.Key] = r
	x.uidKey[ownerKey{r.Key.Namespace, r.UID}] = r.Key
	affected = append(affected, r.Key)
	x.recompute(r.Key)
	x.mu.Unlock()
	x.notify.fire(affected...)
}

// DeleteSandbox forgets a Sandbox.
func (x *Index) DeleteSandbox(key SandboxKey) {
	x.mu.Lock()
	if old := x.sandboxes[key]; old != nil {
		delete(x.uidKey, ownerKey{key.Namespace, old.UID})
		if x.namespaces[key.Namespace]--; x.namespaces[key.Namespace] <= 0 {
			delete(x.namespaces, key.Namespace)
		}
	}
	delete(x.sandboxes, key)
	delete(x.history, key)
	x.recompute(key)
	x.mu.Unlock()
	x.notify.fire(key)
}

// UpsertPod records the latest state of a Pod controlled by a Sandbox.
func (x *Index) UpsertPod(p *PodRecord) {
	x.mu.Lock()
	keys := x.removePodLocked(p.UID)
	x.pods[p.UID] = p
	if p.OwnerUID != "" {
		m := x.podsByOwner[podOwner(p)]
		if m == nil {
			m = map[string]*PodRecord{}
			x.podsByOwner[podOwner(p)] = m
		}
		m[p.UID] = p
	}
	for _, s := range p.PodIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		a = a.Unmap()
		m := x.ipPods[a]
		if m == nil {
			m = map[string]bool{}
			x.ipPods[a] = m
		}
		m[p.UID] = true
		// Another sandbox whose pod shares this address must re-verify.
		keys = append(keys, x.keysHoldingLocked(a)...)
	}
	if k, ok := x.ownerOfLocked(p); ok {
		keys = append(keys, k)
	}
	keys = x.recomputeAll(keys)
	x.mu.Unlock()
	x.notify.fire(keys...)
}

// DeletePod forgets a Pod by UID.
func (x *Index) DeletePod(uid string) {
	x.mu.Lock()
	keys := x.recomputeAll(x.removePodLocked(uid))
	x.mu.Unlock()
	x.notify.fire(keys...)
}

// removePodLocked drops a pod and returns the sandboxes whose view depended on it.
func (x *Index) removePodLocked(uid string) []SandboxKey {
	old := x.pods[uid]
	if old == nil {
		return nil
	}
	delete(x.pods, uid)
	var keys []SandboxKey
	if m := x.podsByOwner[podOwner(old)]; m != nil {
		delete(m, uid)
		if len(m) == 0 {
			delete(x.podsByOwner, podOwner(old))
		}
	}
	if k, ok := x.ownerOfLocked(old); ok {
		keys = append(keys, k)
	}
	for _, s := range old.PodIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if m := x.ipPods[a]; m != nil {
			delete(m, uid)
			if len(m) == 0 {
				delete(x.ipPods, a)
			}
		}
		keys = append(keys, x.keysHoldingLocked(a)...)
	}
	return keys
}

// keysHoldingLocked lists sandboxes whose pods hold address a.
func (x *Index) keysHoldingLocked(a netip.Addr) []SandboxKey {
	var keys []SandboxKey
	for uid := range x.ipPods[a] {
		if p := x.pods[uid]; p != nil {
			if k, ok := x.ownerOfLocked(p); ok {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// ownerOfLocked returns the Sandbox controlling p: same namespace, same UID.
func (x *Index) ownerOfLocked(p *PodRecord) (SandboxKey, bool) {
	if p.OwnerUID == "" {
		return SandboxKey{}, false
	}
	k, ok := x.uidKey[podOwner(p)]
	return k, ok
}

func (x *Index) recomputeAll(keys []SandboxKey) []SandboxKey {
	slices.SortFunc(keys, func(a, b SandboxKey) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	keys = slices.Compact(keys)
	for _, k := range keys {
		x.recompute(k)
	}
	return keys
}

// recompute derives the snapshot of key from the records. Caller holds mu.
func (x *Index) recompute(key SandboxKey) {
	sb := x.sandboxes[key]
	if sb == nil {
		delete(x.snaps, key)
		return
	}
	s := &Snapshot{
		Key:             key,
		Exists:          true,
		UID:             sb.UID,
		ResourceVersion: sb.ResourceVersion,
		Deleting:        sb.Deleting,
		Suspended:       sb.Suspended,
		NoAutoResume:    sb.NoAutoResume,
		WarmPool:        sb.WarmPool,
		Ports:           sb.Ports,
		LastActivity:    sb.LastActivity,
		ReadySince:      sb.ReadySince,
	}
	s.Routable, s.Terminal, s.Reason, s.Addrs = x.routability(sb)
	prev := x.snaps[key]
	hist := x.history[key]
	if prev != nil {
		for _, a := range prev.Addrs {
			if !slices.Contains(s.Addrs, a) && !slices.Contains(hist, a) {
				hist = append(hist, a)
			}
		}
		if len(hist) > historyLen {
			hist = hist[len(hist)-historyLen:]
		}
		x.history[key] = hist
	}
	s.History = slices.Clone(hist)
	x.snaps[key] = s
}

// routability is the core rule: an address is routable only if it belongs
// to the single live pod controlled by the Sandbox, is reported by both the
// Pod and the Sandbox status, and is not also held by another sandbox's pod
// (IP reuse while caches converge).
func (x *Index) routability(sb *SandboxRecord) (ok, terminal bool, reason string, addrs []netip.Addr) {
	switch {
	case sb.Deleting:
		return false, true, "Sandbox is being deleted", nil
	case sb.Suspended:
		return false, false, "Sandbox is suspended", nil
	case !sb.Ready:
		r := "Sandbox is not ready"
		if sb.ReadyReason != "" {
			r += " (" + sb.ReadyReason + ")"
		}
		return false, terminalReasons[sb.ReadyReason], r, nil
	}
	var live []*PodRecord
	for _, p := range x.podsByOwner[ownerKey{sb.Key.Namespace, sb.UID}] {
		if !p.Deleting {
			live = append(live, p)
		}
	}
	switch len(live) {
	case 0:
		return false, false, "Sandbox has no running pod", nil
	case 1:
	default:
		return false, false, "Sandbox controls more than one pod", nil
	}
	pod := live[0]
	if !pod.Ready {
		return false, false, "Sandbox pod is not ready", nil
	}
	for _, ps := range pod.PodIPs {
		a, err := netip.ParseAddr(ps)
		if err != nil {
			continue
		}
		a = a.Unmap()
		if !containsAddr(sb.PodIPs, a) {
			continue
		}
		shared := false
		for uid := range x.ipPods[a] {
			if uid != pod.UID {
				shared = true
			}
		}
		if !shared {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return false, false, "Sandbox has no verified pod address", nil
	}
	slices.SortStableFunc(addrs, func(a, b netip.Addr) int {
		switch {
		case a.Is4() && !b.Is4():
			return -1
		case !a.Is4() && b.Is4():
			return 1
		}
		return 0
	})
	return true, false, "", addrs
}

func containsAddr(list []string, a netip.Addr) bool {
	for _, s := range list {
		if b, err := netip.ParseAddr(s); err == nil && b.Unmap() == a {
			return true
		}
	}
	return false
}

// notifier hands out per-key channels closed on the next change. Entries are
// reference counted so that waiters for names that never appear (probes,
// typos, attackers) do not accumulate.
type notifier struct {
	mu sync.Mutex
	m  map[SandboxKey]*waitEntry
}

type waitEntry struct {
	ch   chan struct{}
	refs int
}

func (n *notifier) subscribe(k SandboxKey) (<-chan struct{}, func()) {
	n.mu.Lock()
	e := n.m[k]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		n.m[k] = e
	}
	e.refs++
	n.mu.Unlock()
	var once sync.Once
	return e.ch, func() {
		once.Do(func() {
			n.mu.Lock()
			e.refs--
			if e.refs == 0 && n.m[k] == e {
				delete(n.m, k)
			}
			n.mu.Unlock()
		})
	}
}

func (n *notifier) fire(keys ...SandboxKey) {
	n.mu.Lock()
	for _, k := range keys {
		if e := n.m[k]; e != nil {
			close(e.ch)
			delete(n.m, k)
		}
	}
	n.mu.Unlock()
}

package warmpool

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// Incremental member accounting.
//
// A full pass lists and classifies every member of the pool, which is
// O(pool size) per pass: under a stream of claims against a pool of
// thousands, every adoption and every refill's status change costs a walk
// over all members. Instead, the Sandbox event handler records which
// members changed (by UID), and a pass whose pool, template and clock
// give it nothing else to look at re-classifies only those, keeping the
// counts (active, ready, terminating) as running totals: O(changes) per
// pass.
//
// Correctness rests on two orders:
//   - the informer updates its cache before it calls the handler, and the
//     handler records a member before lowering the pool's expectations;
//   - a pass reads the expectations before it takes the recorded changes.
//
// So when a pass sees the expectations satisfied, every create of ours
// has been recorded, and the changes it takes, read back from the cache
// (never from the event, which may be older than the cache), bring the
// totals to the cache's state. Changes recorded after the take are left
// for the next pass. Anything the incremental pass cannot account for
// (an orphan, a forged or stale member, a missing warm label, a member
// stuck past its readiness grace, an excess to delete, a pool or template
// change, an error) falls back to the full pass, which rebuilds the totals
// from a list; a full pass also runs when fullResyncInterval has passed
// since the last one, so a pool stays level-triggered whatever the totals
// say.

// fullResyncInterval is the longest an event-driven pool goes without a
// full pass (list and recount).
const fullResyncInterval = 30 * time.Second

// memberClass is what a pass concluded about one Sandbox.
type memberClass uint8

const (
	// notMember: not counted (gone, unlabelled, controlled by another
	// owner such as a claim).
	notMember memberClass = iota
	// activeUnready and activeReady are members that count as replicas.
	activeUnready
	activeReady
	// terminating members count against the target until they are gone.
	terminating
)

// tally is one pool's running member totals.
type tally struct {
	members                     map[types.UID]memberClass
	active, ready, terminatingN int
	// due holds, for each unready member, when its readiness grace runs
	// out (plus graceSlack): a full pass looks at it then. Unready
	// members are the refills in flight, so this stays small.
	due map[types.UID]time.Time
}

func newTally() tally {
	return tally{members: map[types.UID]memberClass{}, due: map[types.UID]time.Time{}}
}

// set records uid's class, adjusting the totals by the difference; due
// is the grace deadline of an unready member (ignored otherwise).
func (t *tally) set(uid types.UID, c memberClass, due time.Time) {
	t.add(t.members[uid], -1)
	if c == notMember {
		delete(t.members, uid)
	} else {
		t.members[uid] = c
	}
	t.add(c, 1)
	if c == activeUnready {
		t.due[uid] = due
	} else {
		delete(t.due, uid)
	}
}

// nextDue is the earliest grace deadline of an unready member (zero if
// none).
func (t *tally) nextDue() time.Time {
	var first time.Time
	for _, d := range t.due {
		if first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

func (t *tally) add(c memberClass, d int) {
	switch c {
	case activeUnready:
		t.active += d
	case activeReady:
		t.active += d
		t.ready += d
	case terminating:
		t.terminatingN += d
	}
}

// poolTrack is the tracker's state of one pool.
type poolTrack struct {
	// dirty holds the members changed since the last pass took them.
	dirty map[types.UID]types.NamespacedName
	// full is set by an event the incremental pass cannot account for.
	full bool

	// synced: the totals below are from a full pass of this pool UID,
	// generation and template version, plus every change taken since.
	synced     bool
	poolUID    types.UID
	generation int64
	tmplUID    types.UID
	tmplRV     string
	fullAt     time.Time
	t          tally
}

// memberTracker holds every pool's recorded changes and totals. The
// handler writes changes; a pool's passes (never concurrent for one pool)
// take them and update the totals.
type memberTracker struct {
	mu    sync.Mutex
	pools map[string]*poolTrack
}

func newMemberTracker() *memberTracker { return &memberTracker{pools: map[string]*poolTrack{}} }

func (m *memberTracker) pool(key string) *poolTrack {
	p := m.pools[key]
	if p == nil {
		p = &poolTrack{dirty: map[types.UID]types.NamespacedName{}}
		m.pools[key] = p
	}
	return p
}

// record notes that a member of the pool key changed (or was deleted).
func (m *memberTracker) record(key string, uid types.UID, name types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pool(key).dirty[uid] = name
}

// markFull makes the next pass of key a full one.
func (m *memberTracker) markFull(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pool(key).full = true
}

// snapshot is what a pass takes from the tracker.
type snapshot struct {
	dirty map[types.UID]types.NamespacedName
	full  bool
	track poolTrack // a copy of the sync state; its tally is shared
}

// take hands the recorded changes to a pass and starts a new set.
func (m *memberTracker) take(key string) snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pool(key)
	s := snapshot{dirty: p.dirty, full: p.full, track: *p}
	p.dirty, p.full = map[types.UID]types.NamespacedName{}, false
	return s
}

// incrementalOK reports whether a pass may update the totals from the
// changes alone rather than list the pool.
func (s *snapshot) incrementalOK(pool *extv1beta1.SandboxWarmPool, ti *templateInfo, now time.Time) bool {
	p := &s.track
	return !s.full && p.synced && ti != nil &&
		p.poolUID == pool.UID && p.generation == pool.Generation &&
		p.tmplUID == ti.tmpl.UID && p.tmplRV == ti.tmpl.ResourceVersion &&
		now.Sub(p.fullAt) < fullResyncInterval &&
		(len(p.t.due) == 0 || now.Before(p.t.nextDue()))
}

// synced stores the totals a full pass counted.
func (m *memberTracker) synced(key string, pool *extv1beta1.SandboxWarmPool, ti *templateInfo, t tally, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pool(key)
	p.synced, p.poolUID, p.generation = true, pool.UID, pool.Generation
	p.tmplUID, p.tmplRV = ti.tmpl.UID, ti.tmpl.ResourceVersion
	p.fullAt, p.t = now, t
}

// advanced stores the totals after an incremental pass.
func (m *memberTracker) advanced(key string, t tally) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pool(key).t = t
}

// unsync makes the next pass of key a full one and drops its totals.
func (m *memberTracker) unsync(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pool(key)
	p.synced, p.t = false, tally{}
}

// forget drops a deleted pool's state.
func (m *memberTracker) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pools, key)
}

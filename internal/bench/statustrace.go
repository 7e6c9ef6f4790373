package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// StatusTrace attributes Sandbox status writes: it watches every Sandbox
// and, for each new object version whose status differs from the previous
// one, records what changed (the Ready condition's status and reason, the
// PodScheduled condition, the other status fields). The apiserver's
// request counter says how many status patches arrived; the trace says
// which transitions they made, and the difference between the two is the
// patches that changed nothing (a no-op patch writes no new version, so it
// sends no watch event).
type StatusTrace struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// last is each Sandbox's status as last seen, by UID.
	last map[string]*sandboxv1beta1.SandboxStatus
	// seen is how many status-changing versions each Sandbox had.
	seen map[string]int
	// Transitions counts status changes by their description.
	transitions map[string]int
	// metaOnly counts new versions whose status did not change (spec or
	// metadata writes).
	metaOnly int
	// notReadyRewrites counts changes from one not-ready status to another.
	notReadyRewrites int
	err              error
}

// StartStatusTrace starts watching Sandboxes in every namespace from the
// current state (the initial list seeds each Sandbox's last status, so only
// changes from now on are counted).
func StartStatusTrace(ctx context.Context, rc *rest.Config) (*StatusTrace, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = -1, 1000
	c, err := client.NewWithWatch(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("status trace client: %w", err)
	}
	var list sandboxv1beta1.SandboxList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("status trace: listing sandboxes: %w", err)
	}
	t := &StatusTrace{done: make(chan struct{}), last: map[string]*sandboxv1beta1.SandboxStatus{},
		seen: map[string]int{}, transitions: map[string]int{}}
	for i := range list.Items {
		t.last[string(list.Items[i].UID)] = list.Items[i].Status.DeepCopy()
	}
	ctx, t.cancel = context.WithCancel(ctx)
	go t.run(ctx, c, list.ResourceVersion)
	return t, nil
}

func (t *StatusTrace) run(ctx context.Context, c client.WithWatch, rv string) {
	defer close(t.done)
	for ctx.Err() == nil {
		// Resumed from the last version seen: the apiserver closes watches
		// after its request timeout.
		w, err := c.Watch(ctx, &sandboxv1beta1.SandboxList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			if ctx.Err() == nil {
				t.setErr(fmt.Errorf("status trace: watching sandboxes: %w", err))
			}
			return
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() != nil {
					return // Stop cancelled the watch: the trace ended cleanly
				}
				// Usually "too old resource version" after a long gap: the
				// trace cannot be complete any more, so say so.
				t.setErr(fmt.Errorf("status trace: watch error: %v", ev.Object))
				w.Stop()
				return
			}
			sb, ok := ev.Object.(*sandboxv1beta1.Sandbox)
			if !ok {
				continue
			}
			rv = sb.ResourceVersion
			t.observe(ev.Type, sb)
		}
		w.Stop()
	}
}

func (t *StatusTrace) setErr(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
}

func (t *StatusTrace) observe(typ watch.EventType, sb *sandboxv1beta1.Sandbox) {
	uid := string(sb.UID)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch typ {
	case watch.Added:
		t.last[uid] = sb.Status.DeepCopy()
		if !equality.Semantic.DeepEqual(&sb.Status, &sandboxv1beta1.SandboxStatus{}) {
			t.transitions["(created with a status)"]++
		}
	case watch.Modified:
		old := t.last[uid]
		if old == nil {
			old = &sandboxv1beta1.SandboxStatus{}
		}
		if equality.Semantic.DeepEqual(old, &sb.Status) {
			t.metaOnly++
			return
		}
		t.transitions[DescribeStatusChange(old, &sb.Status)]++
		if len(old.Conditions) > 0 && !sandboxReady(old) && !sandboxReady(&sb.Status) {
			t.notReadyRewrites++
		}
		t.seen[uid]++
		t.last[uid] = sb.Status.DeepCopy()
	case watch.Deleted:
		delete(t.last, uid)
	}
}

// StatusTraceResult is what a trace found.
type StatusTraceResult struct {
	// Changes is the number of status-changing versions seen.
	Changes int `json:"changes"`
	// Transitions counts them by DescribeStatusChange.
	Transitions map[string]int `json:"transitions"`
	// PerSandbox maps "k changes" to how many Sandboxes had k.
	PerSandbox map[int]int `json:"per_sandbox"`
	// MetadataOnly counts new versions with an unchanged status.
	MetadataOnly int `json:"metadata_only"`
	// NotReadyRewrites counts changes from a not-ready status to another
	// not-ready one: the writes beyond "first status, then Ready" of a
	// Sandbox that starts.
	NotReadyRewrites int `json:"not_ready_rewrites"`
}

func sandboxReady(s *sandboxv1beta1.SandboxStatus) bool {
	return meta.IsStatusConditionTrue(s.Conditions, sandboxv1beta1.SandboxConditionReady)
}

// Stop ends the trace and returns what it saw, or the error that made it
// incomplete.
func (t *StatusTrace) Stop() (*StatusTraceResult, error) {
	t.cancel()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &StatusTraceResult{Transitions: map[string]int{}, PerSandbox: map[int]int{}, MetadataOnly: t.metaOnly,
		NotReadyRewrites: t.notReadyRewrites}
	for k, v := range t.transitions {
		r.Transitions[k] = v
		r.Changes += v
	}
	for _, n := range t.seen {
		r.PerSandbox[n]++
	}
	return r, t.err
}

// String lists the transitions, most frequent first.
func (r *StatusTraceResult) String() string {
	keys := make([]string, 0, len(r.Transitions))
	for k := range r.Transitions {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if r.Transitions[keys[i]] != r.Transitions[keys[j]] {
			return r.Transitions[keys[i]] > r.Transitions[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d status changes (not-ready to not-ready %d, metadata-only versions %d); per Sandbox %v\n",
		r.Changes, r.NotReadyRewrites, r.MetadataOnly, r.PerSandbox)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %6d  %s\n", r.Transitions[k], k)
	}
	return b.String()
}

// DescribeStatusChange names a status change by the states it moved
// between: the Ready and PodScheduled conditions (status/reason, and
// whether a Pod problem is in Ready's message) and the other fields that
// changed.
func DescribeStatusChange(old, cur *sandboxv1beta1.SandboxStatus) string {
	state := func(s *sandboxv1beta1.SandboxStatus) string {
		if len(s.Conditions) == 0 {
			return "none"
		}
		var parts []string
		for _, typ := range []string{sandboxv1beta1.SandboxConditionReady, sandboxv1beta1.SandboxConditionPodScheduled} {
			c := meta.FindStatusCondition(s.Conditions, typ)
			if c == nil {
				continue
			}
			p := fmt.Sprintf("%s=%s/%s", typ, c.Status, c.Reason)
			if typ == sandboxv1beta1.SandboxConditionReady && strings.Contains(c.Message, ": ") {
				p += "(msg)"
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, ",")
	}
	var fields []string
	if !equality.Semantic.DeepEqual(old.PodIPs, cur.PodIPs) {
		fields = append(fields, "podIPs")
	}
	if old.NodeName != cur.NodeName {
		fields = append(fields, "nodeName")
	}
	if old.LabelSelector != cur.LabelSelector {
		fields = append(fields, "selector")
	}
	if old.Service != cur.Service || old.ServiceFQDN != cur.ServiceFQDN {
		fields = append(fields, "service")
	}
	if !equality.Semantic.DeepEqual(old.Conditions, cur.Conditions) && state(old) == state(cur) {
		fields = append(fields, "conditions(same states)")
	}
	o := old.DeepCopy()
	o.PodIPs, o.NodeName, o.LabelSelector, o.Service, o.ServiceFQDN, o.Conditions = cur.PodIPs, cur.NodeName, cur.LabelSelector, cur.Service, cur.ServiceFQDN, cur.Conditions
	if !equality.Semantic.DeepEqual(o, cur) {
		fields = append(fields, "other")
	}
	return fmt.Sprintf("%s -> %s [%s]", state(old), state(cur), strings.Join(fields, " "))
}

package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/mergepatch"
)

// setPodStatusFields copies what status shows about the Pod. A foreign
// Pod's IPs and node never leak into status.
func setPodStatusFields(sb *sandboxv1beta1.Sandbox, pr podResult) {
	if pr.pod == nil {
		sb.Status.PodIPs = nil
		sb.Status.NodeName = ""
		return
	}
	sb.Status.LabelSelector = labels.SandboxNameHash + "=" + labels.NameHash(sb.Name)
	if !pr.owned {
		sb.Status.PodIPs = nil
		sb.Status.NodeName = ""
		return
	}
	var ips []string
	for _, ip := range pr.pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && pr.pod.Status.PodIP != "" {
		ips = []string{pr.pod.Status.PodIP}
	}
	sb.Status.PodIPs = ips
	sb.Status.NodeName = pr.pod.Spec.NodeName
}

// setServiceStatusFields records the tracked Service and its DNS name.
func setServiceStatusFields(sb *sandboxv1beta1.Sandbox, svc *corev1.Service, clusterDomain string) {
	if svc == nil {
		sb.Status.Service = ""
		sb.Status.ServiceFQDN = ""
		return
	}
	sb.Status.Service = svc.Name
	sb.Status.ServiceFQDN = fmt.Sprintf("%s.%s.svc.%s", svc.Name, sb.Namespace, clusterDomain)
}

// serviceRequired: asked for explicitly, or (backward compatibility) an
// owned Service exists while spec.service is unset.
func serviceRequired(sb *sandboxv1beta1.Sandbox, svc *corev1.Service) bool {
	if sb.Spec.Service != nil {
		return *sb.Spec.Service
	}
	return svc != nil
}

// writeStatus persists the status when it changed, with one merge patch of
// the status subresource. The Sandbox controller is the only writer of
// Sandbox status, so no resourceVersion precondition is needed. It returns
// how long to wait before a deferred write is due.
func (r *Reconciler) writeStatus(ctx context.Context, sb *sandboxv1beta1.Sandbox, old *sandboxv1beta1.SandboxStatus) (time.Duration, error) {
	key := types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}
	write, wait := r.statusDue(key, old, &sb.Status)
	if !write {
		return wait, nil
	}
	if err := r.patchStatus(ctx, sb, old); err != nil {
		return 0, err
	}
	r.clock.forget(key)
	return 0, nil
}

// statusDue decides whether a pass writes the status cur over old now; if
// not, wait is when a deferred write is due (0: nothing to write).
func (r *Reconciler) statusDue(key types.NamespacedName, old, cur *sandboxv1beta1.SandboxStatus) (write bool, wait time.Duration) {
	if equality.Semantic.DeepEqual(old, cur) {
		r.clock.forget(key)
		return false, 0
	}
	if nodeNameOnlyChange(old, cur) && !isReady(cur) {
		// The node name rides along with the next write (normally Ready).
		return false, 0
	}
	if w := r.Options.StatusCoalesceWindow; w > 0 && refinesNotReady(old, cur) {
		if schedulingOnlyChange(old, cur) {
			// The scheduler placed a Pod whose not-ready status is already
			// written: on its own that write would be the second of three
			// (first not-ready, scheduled, Ready). It waits longer, for the
			// Ready write it normally rides along with; the bound keeps a
			// slow start (an image pull) from hiding the placement.
			w *= scheduledRideAlong
		}
		if wait := r.clock.wait(key, r.now(), w); wait > 0 {
			return false, wait
		}
	}
	return true, 0
}

func (r *Reconciler) patchStatus(ctx context.Context, sb *sandboxv1beta1.Sandbox, old *sandboxv1beta1.SandboxStatus) error {
	p, err := statusMergePatch(old, &sb.Status)
	if err != nil {
		return err
	}
	patch, err := p.Client()
	if err != nil {
		return fmt.Errorf("encoding status patch: %w", err)
	}
	patched := sb.DeepCopy()
	if err := r.Status().Patch(ctx, patched, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing sandbox status: %w", err)
	}
	r.clock.remember(types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}, sb.ResourceVersion, patched.ResourceVersion, &patched.Status)
	return nil
}

// statusMergePatch is {"status": new} with explicit nulls for fields
// that were set before and are empty now: JSON merge patch cannot clear a
// field by omitting it. The status goes through a map to learn which
// fields the encoding leaves out, so its keys are sent sorted. There is no
// resourceVersion precondition: the Sandbox controller is the only writer
// of Sandbox status.
func statusMergePatch(old, cur *sandboxv1beta1.SandboxStatus) (mergepatch.Patch, error) {
	o, err := statusFields(old)
	if err != nil {
		return mergepatch.Patch{}, fmt.Errorf("encoding old status: %w", err)
	}
	n, err := statusFields(cur)
	if err != nil {
		return mergepatch.Patch{}, fmt.Errorf("encoding status: %w", err)
	}
	for k := range o {
		if _, ok := n[k]; !ok {
			n[k] = nil
		}
	}
	return mergepatch.Patch{Fields: map[string]any{"status": n}}, nil
}

// statusFields is a status as its JSON object, without the fields its
// encoding omits because they are empty.
func statusFields(s *sandboxv1beta1.SandboxStatus) (map[string]any, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func isReady(s *sandboxv1beta1.SandboxStatus) bool {
	return meta.IsStatusConditionTrue(s.Conditions, sandboxv1beta1.SandboxConditionReady)
}

// scheduledRideAlong is how many coalesce windows a scheduling-only
// change of a not-ready Sandbox may wait for the next write.
const scheduledRideAlong = 5

// schedulingOnlyChange reports a change of only the node name and the
// PodScheduled condition to True, on a status that already has conditions
// (the first status is the coalesce window's, not this).
func schedulingOnlyChange(old, cur *sandboxv1beta1.SandboxStatus) bool {
	if len(old.Conditions) == 0 {
		return false
	}
	c := meta.FindStatusCondition(cur.Conditions, sandboxv1beta1.SandboxConditionPodScheduled)
	if c == nil || c.Status != metav1.ConditionTrue {
		return false
	}
	o := old.DeepCopy()
	o.NodeName = cur.NodeName
	meta.SetStatusCondition(&o.Conditions, *c)
	return equality.Semantic.DeepEqual(o, cur)
}

func nodeNameOnlyChange(old, cur *sandboxv1beta1.SandboxStatus) bool {
	o := old.DeepCopy()
	o.NodeName = cur.NodeName
	return equality.Semantic.DeepEqual(o, cur)
}

// refinesNotReady reports a change that only refines a provisioning state:
// a brand-new Sandbox's first not-ready status, or Ready staying
// False/DependenciesNotReady with Suspended unchanged. No client decision
// depends on seeing these at once, and a Sandbox that turns Ready inside
// the window then costs a single status write.
func refinesNotReady(old, cur *sandboxv1beta1.SandboxStatus) bool {
	notReady := func(s *sandboxv1beta1.SandboxStatus) bool {
		c := meta.FindStatusCondition(s.Conditions, sandboxv1beta1.SandboxConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == sandboxv1beta1.ReasonDependenciesNotReady
	}
	if !notReady(cur) {
		return false
	}
	if messageProblem(readyMessage(cur)) != messageProblem(readyMessage(old)) {
		// A Pod problem appeared, changed or went away: users wait on it.
		return false
	}
	if len(old.Conditions) == 0 {
		s := meta.FindStatusCondition(cur.Conditions, sandboxv1beta1.SandboxConditionSuspended)
		return s != nil && s.Reason == sandboxv1beta1.ReasonNotSuspended
	}
	if !notReady(old) {
		return false
	}
	os := meta.FindStatusCondition(old.Conditions, sandboxv1beta1.SandboxConditionSuspended)
	ns := meta.FindStatusCondition(cur.Conditions, sandboxv1beta1.SandboxConditionSuspended)
	return os != nil && ns != nil && os.Status == ns.Status && os.Reason == ns.Reason
}

// writeClock remembers, per Sandbox, when a deferred status change was
// first seen (so redeliveries inside the window do not push the write
// further out) and the last status written (so a pass that reads a cache
// which has not caught up with our own write does not write it again).
type writeClock struct {
	mu      sync.Mutex
	first   map[types.NamespacedName]time.Time
	written map[types.NamespacedName]writtenStatus
}

// writtenStatus is a status we wrote: read at resourceVersion before, it
// became (or, a patch that changed nothing, left) resourceVersion after.
type writtenStatus struct {
	before, after string
	status        *sandboxv1beta1.SandboxStatus
}

func newWriteClock() *writeClock {
	return &writeClock{first: map[types.NamespacedName]time.Time{}, written: map[types.NamespacedName]writtenStatus{}}
}

// remember records that status was written by a pass that read
// resourceVersion before, and that the write produced after.
func (c *writeClock) remember(key types.NamespacedName, before, after string, status *sandboxv1beta1.SandboxStatus) {
	c.mu.Lock()
	c.written[key] = writtenStatus{before: before, after: after, status: status.DeepCopy()}
	c.mu.Unlock()
}

// catchUp replaces the status of a cached Sandbox that predates our last
// status write with the status we wrote.
//
// Predating is not only "the version our pass read": the status patch has
// no precondition, so another writer's change (a label, a claim's adoption)
// may land between our read and our write, and the cache then shows that
// intermediate version, newer than what we read and older than our write.
// Taking its status for the truth would compute and announce the written
// change a second time. Resource versions of one object are comparable
// integers (KEP-5504, stable in Kubernetes 1.35; apimachinery's
// resourceversion package); when they are not well formed, only the
// version we read counts as predating.
func (c *writeClock) catchUp(sb *sandboxv1beta1.Sandbox) {
	key := types.NamespacedName{Namespace: sb.Namespace, Name: sb.Name}
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.written[key]
	if !ok {
		return
	}
	if predates(sb.ResourceVersion, w) {
		sb.Status = *w.status.DeepCopy()
		return
	}
	delete(c.written, key) // the cache has reached our write
}

// predates reports whether the cached version rv is older than the write w.
func predates(rv string, w writtenStatus) bool {
	if rv == w.before {
		return true
	}
	cmp, err := resourceversion.CompareResourceVersion(rv, w.after)
	return err == nil && cmp < 0
}

// wait returns the time left before a deferred write of key is due.
func (c *writeClock) wait(key types.NamespacedName, now time.Time, window time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.first[key]
	if !ok {
		c.first[key] = now
		return window
	}
	return window - now.Sub(t)
}

func (c *writeClock) forget(key types.NamespacedName) {
	c.mu.Lock()
	delete(c.first, key)
	c.mu.Unlock()
}

// drop forgets everything about a Sandbox that is gone.
func (c *writeClock) drop(key types.NamespacedName) {
	c.mu.Lock()
	delete(c.first, key)
	delete(c.written, key)
	c.mu.Unlock()
}

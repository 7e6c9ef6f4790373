package sandbox

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/expectations"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Child kinds, as they appear in expectation entries.
const (
	kindPod     = "Pod"
	kindService = "Service"
	kindPVC     = "PersistentVolumeClaim"
)

// childID names one child of a Sandbox in its expectations.
func childID(kind, name string) string { return kind + "/" + name }

// sandboxKey is the expectations key of a Sandbox.
func sandboxKey(namespace, name string) string {
	return types.NamespacedName{Namespace: namespace, Name: name}.String()
}

// controllingSandbox returns the expectations key and UID of the Sandbox
// that controls obj, if one does. The UID, not the name, is what the
// expectations match on, so a child of an earlier Sandbox of the same name
// (or one whose owner reference a tenant wrote to name ours) never
// satisfies our Sandbox's expectations.
func controllingSandbox(obj client.Object) (string, types.UID, bool) {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "Sandbox" {
		return "", "", false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != sandboxv1beta1.GroupVersion.Group {
		return "", "", false
	}
	return sandboxKey(obj.GetNamespace(), ref.Name), ref.UID, true
}

// tracked reports whether obj carries the tracking label: only such
// children can be ours, everything else in the cluster is noise for the
// work queue.
func tracked(obj client.Object) bool {
	_, ok := obj.GetLabels()[labels.SandboxNameHash]
	return ok
}

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// childEvents records what each child event proves the informer cache has
// seen (our create, our delete) and only then enqueues the controlling
// Sandbox. Doing it here, before the enqueue and not in Reconcile, is what
// makes the wait in Reconcile safe: the pass an event triggers always finds
// the expectation that event satisfies already cleared.
type childEvents struct {
	kind string
	exp  *expectations.Children
	// owner enqueues the controlling Sandbox.
	owner handler.EventHandler
	// updates says whether update and delete events enqueue too (Pods and
	// Services report state the status shows; PVCs do not).
	updates bool
}

var _ handler.EventHandler = childEvents{}

func (h childEvents) Create(ctx context.Context, e event.CreateEvent, q queue) {
	h.observe(e.Object, true)
	if tracked(e.Object) {
		h.owner.Create(ctx, e, q)
	}
}

func (h childEvents) Update(ctx context.Context, e event.UpdateEvent, q queue) {
	if e.ObjectOld.GetUID() != e.ObjectNew.GetUID() {
		// Replaced between two lists (a relist after a dropped watch): the
		// old object is gone and the new one was created.
		h.observeGone(e.ObjectOld)
		h.observe(e.ObjectNew, true)
	} else {
		h.observe(e.ObjectNew, false)
	}
	if h.updates && tracked(e.ObjectNew) {
		h.owner.Update(ctx, e, q)
	}
}

func (h childEvents) Delete(ctx context.Context, e event.DeleteEvent, q queue) {
	h.observeGone(e.Object)
	if h.updates && tracked(e.Object) {
		h.owner.Delete(ctx, e, q)
	}
}

func (h childEvents) Generic(ctx context.Context, e event.GenericEvent, q queue) {
	if tracked(e.Object) {
		h.owner.Generic(ctx, e, q)
	}
}

// observe clears the pending create of obj (when created is set) and its
// pending delete once the cache shows it terminating: the delete request
// has then taken effect, and what follows is the object's own shutdown.
func (h childEvents) observe(obj client.Object, created bool) {
	key, uid, ok := controllingSandbox(obj)
	if !ok {
		return
	}
	id := childID(h.kind, obj.GetName())
	if created {
		h.exp.CreationObserved(key, uid, id)
	}
	if obj.GetDeletionTimestamp() != nil {
		h.exp.DeletionObserved(key, uid, id, obj.GetUID())
	}
}

// observeGone clears the pending delete of an object the cache dropped.
func (h childEvents) observeGone(obj client.Object) {
	if key, uid, ok := controllingSandbox(obj); ok {
		h.exp.DeletionObserved(key, uid, childID(h.kind, obj.GetName()), obj.GetUID())
	}
}

// createChild creates obj, a child of sb of the given kind, expecting its
// add event before the request is sent (the event can beat the response).
// A failed create is never observed, so its expectation is dropped; on
// AlreadyExists the caller reads what is there and decides by owner UID.
func (r *Reconciler) createChild(ctx context.Context, sb *sandboxv1beta1.Sandbox, kind string, obj client.Object) error {
	key, id := sandboxKey(sb.Namespace, sb.Name), childID(kind, obj.GetName())
	r.exp.ExpectCreation(key, sb.UID, id)
	if err := r.Create(ctx, obj, client.FieldOwner(ControllerName)); err != nil {
		r.exp.Cancel(key, sb.UID, id)
		return err
	}
	return nil
}

// deleteChild deletes obj, a child of sb, by UID, expecting the cache to
// show it terminating or gone before the Sandbox is acted on again. NotFound
// is returned as is: the object is gone and its delete event needs no wait.
func (r *Reconciler) deleteChild(ctx context.Context, sb *sandboxv1beta1.Sandbox, kind string, obj client.Object) error {
	key, id, uid := sandboxKey(sb.Namespace, sb.Name), childID(kind, obj.GetName()), obj.GetUID()
	r.exp.ExpectDeletion(key, sb.UID, id, uid)
	if err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil {
		r.exp.Cancel(key, sb.UID, id)
		return err
	}
	return nil
}

// readExisting reads the child a create collided with past the cache, which
// has not seen it (else there would have been no create). When it is ours
// (an earlier create whose event is still on its way), its add event is
// expected like a fresh create's, so the next pass waits for it instead of
// colliding again.
func (r *Reconciler) readExisting(ctx context.Context, sb *sandboxv1beta1.Sandbox, kind string, obj client.Object) error {
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	if !ownedBy(obj, sb) {
		return nil
	}
	key, id := sandboxKey(sb.Namespace, sb.Name), childID(kind, obj.GetName())
	r.exp.ExpectCreation(key, sb.UID, id)
	// The informer stores an object before it runs the handlers, so if the
	// cache holds it now its add event has been handled (before or after
	// the line above) and there is nothing left to wait for.
	cached, ok := obj.DeepCopyObject().(client.Object)
	if ok && r.Get(ctx, client.ObjectKeyFromObject(obj), cached) == nil && cached.GetUID() == obj.GetUID() {
		r.exp.Cancel(key, sb.UID, id)
	}
	return nil
}

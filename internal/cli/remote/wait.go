package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// CheckFunc judges one observation of the watched object: obj is nil once
// the object does not exist (never created, or deleted). It returns done
// when the wait is over, or an error to end it with.
type CheckFunc func(obj client.Object) (done bool, err error)

// waitObject lists the object named name (by field selector) and then
// watches it from the list's resourceVersion, calling check on every
// observation until check is done or fails, or ctx ends. Watch errors
// and closed watches start over with a fresh list, so a compacted
// resourceVersion or an apiserver restart only delays the wait.
func waitObject(ctx context.Context, c client.WithWatch, newList func() client.ObjectList, namespace, name string, check CheckFunc) error {
	sel := fields.OneTermEqualSelector("metadata.name", name)
	backoff := 100 * time.Millisecond
	for {
		list := newList()
		err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingFieldsSelector{Selector: sel})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !sleep(ctx, &backoff) {
				return ctx.Err()
			}
			continue
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return fmt.Errorf("reading list: %w", err)
		}
		var cur client.Object
		for _, it := range items {
			if o, ok := it.(client.Object); ok && o.GetName() == name {
				cur = o
			}
		}
		if done, err := check(cur); done || err != nil {
			return err
		}
		lm, _ := meta.ListAccessor(list)
		rv := ""
		if lm != nil {
			rv = lm.GetResourceVersion()
		}
		w, err := c.Watch(ctx, newList(), client.InNamespace(namespace), client.MatchingFieldsSelector{Selector: sel},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !sleep(ctx, &backoff) {
				return ctx.Err()
			}
			continue
		}
		done, err := drain(ctx, w, name, check)
		w.Stop()
		if done || err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// drain feeds watch events to check until it is done, the watch ends
// (done false: relist), or ctx ends.
func drain(ctx context.Context, w watch.Interface, name string, check CheckFunc) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			obj, isObj := ev.Object.(client.Object)
			if !isObj || obj.GetName() != name {
				continue
			}
			switch ev.Type {
			case watch.Deleted:
				if done, err := check(nil); done || err != nil {
					return true, err
				}
			case watch.Added, watch.Modified:
				if done, err := check(obj); done || err != nil {
					return true, err
				}
			}
		}
	}
}

func sleep(ctx context.Context, backoff *time.Duration) bool {
	t := time.NewTimer(*backoff)
	defer t.Stop()
	*backoff = min(*backoff*2, 5*time.Second)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// WaitClaim watches a SandboxClaim until check is done.
func WaitClaim(ctx context.Context, c client.WithWatch, namespace, name string, check func(*extv1beta1.SandboxClaim) (bool, error)) error {
	return waitObject(ctx, c, func() client.ObjectList { return &extv1beta1.SandboxClaimList{} }, namespace, name,
		func(o client.Object) (bool, error) {
			cl, _ := o.(*extv1beta1.SandboxClaim)
			return check(cl)
		})
}

// WaitSandbox watches a Sandbox until check is done.
func WaitSandbox(ctx context.Context, c client.WithWatch, namespace, name string, check func(*sandboxv1beta1.Sandbox) (bool, error)) error {
	return waitObject(ctx, c, func() client.ObjectList { return &sandboxv1beta1.SandboxList{} }, namespace, name,
		func(o client.Object) (bool, error) {
			sb, _ := o.(*sandboxv1beta1.Sandbox)
			return check(sb)
		})
}

// ErrDeleted: the object was deleted while waiting for it.
var ErrDeleted = errors.New("deleted while waiting")

// FailedError is a claim or Sandbox that reports a condition no waiting
// will fix.
type FailedError struct {
	Kind, Namespace, Name, Reason, Message string
}

func (e *FailedError) Error() string {
	msg := fmt.Sprintf("%s %s/%s failed: %s", e.Kind, e.Namespace, e.Name, e.Reason)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// BoundFunc is told the Sandbox name once a claim is bound, and whether it
// came from the warm pool.
type BoundFunc func(sandboxName string)

// ProgressFunc is told every observation of the Sandbox while waiting for
// it to become Ready.
type ProgressFunc func(sb *sandboxv1beta1.Sandbox)

// WaitClaimReady waits until the claim is bound to a Sandbox and that
// Sandbox is Ready, and returns the Sandbox. A deleted claim or Sandbox is
// ErrDeleted; a claim reporting a terminal reason is a *FailedError.
func WaitClaimReady(ctx context.Context, c client.WithWatch, namespace, name string, onBound BoundFunc) (*sandboxv1beta1.Sandbox, error) {
	return WaitClaimReadyProgress(ctx, c, namespace, name, onBound, nil)
}

// WaitClaimReadyProgress is WaitClaimReady telling progress about every
// observation of the bound Sandbox.
func WaitClaimReadyProgress(ctx context.Context, c client.WithWatch, namespace, name string, onBound BoundFunc, progress ProgressFunc) (*sandboxv1beta1.Sandbox, error) {
	var sbName string
	err := WaitClaim(ctx, c, namespace, name, func(cl *extv1beta1.SandboxClaim) (bool, error) {
		if cl == nil {
			return false, fmt.Errorf("SandboxClaim %s/%s: %w", namespace, name, ErrDeleted)
		}
		if r := meta.FindStatusCondition(cl.Status.Conditions, sandboxv1beta1.SandboxConditionReady); r != nil &&
			r.Status != metav1.ConditionTrue && IsFailedClaimReason(r.Reason) {
			return false, &FailedError{Kind: "SandboxClaim", Namespace: namespace, Name: name, Reason: r.Reason, Message: r.Message}
		}
		sbName = cl.Status.SandboxStatus.Name
		return sbName != "", nil
	})
	if err != nil {
		return nil, err
	}
	if onBound != nil {
		onBound(sbName)
	}
	return WaitSandboxReadyProgress(ctx, c, namespace, sbName, progress)
}

// WaitSandboxReady waits until the Sandbox's Ready condition is True.
func WaitSandboxReady(ctx context.Context, c client.WithWatch, namespace, name string) (*sandboxv1beta1.Sandbox, error) {
	return WaitSandboxReadyProgress(ctx, c, namespace, name, nil)
}

// WaitSandboxReadyProgress is WaitSandboxReady telling progress about
// every observation.
func WaitSandboxReadyProgress(ctx context.Context, c client.WithWatch, namespace, name string, progress ProgressFunc) (*sandboxv1beta1.Sandbox, error) {
	var out *sandboxv1beta1.Sandbox
	err := WaitSandbox(ctx, c, namespace, name, func(sb *sandboxv1beta1.Sandbox) (bool, error) {
		if sb == nil {
			return false, fmt.Errorf("waiting for Sandbox %s/%s: %w", namespace, name, ErrDeleted)
		}
		if progress != nil {
			progress(sb)
		}
		if sb.IsSuspended() {
			return false, &FailedError{Kind: "Sandbox", Namespace: namespace, Name: name, Reason: StateSuspended,
				Message: "it is suspended; resume it first"}
		}
		if r := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady); r != nil &&
			r.Status != metav1.ConditionTrue && (r.Reason == sandboxv1beta1.ReasonPodFailed || r.Reason == sandboxv1beta1.ReasonSandboxExpired) {
			return false, &FailedError{Kind: "Sandbox", Namespace: namespace, Name: name, Reason: r.Reason, Message: r.Message}
		}
		if IsReady(sb) {
			out = sb
			return true, nil
		}
		return false, nil
	})
	return out, err
}

// WaitSuspended waits until the Sandbox reports Suspended=True.
func WaitSuspended(ctx context.Context, c client.WithWatch, namespace, name string) error {
	return WaitSandbox(ctx, c, namespace, name, func(sb *sandboxv1beta1.Sandbox) (bool, error) {
		if sb == nil {
			return false, fmt.Errorf("waiting for Sandbox %s/%s: %w", namespace, name, ErrDeleted)
		}
		if !sb.IsSuspended() {
			return false, fmt.Errorf("waiting for Sandbox %s/%s to suspend: it was resumed", namespace, name)
		}
		return meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionSuspended), nil
	})
}

// WaitGone waits until the object no longer exists.
func WaitGone(ctx context.Context, c client.WithWatch, newList func() client.ObjectList, namespace, name string) error {
	return waitObject(ctx, c, newList, namespace, name, func(o client.Object) (bool, error) { return o == nil, nil })
}

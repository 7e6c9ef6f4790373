package remote

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Kinds of the owners that matter when telling sandboxes apart.
const (
	kindClaim    = "SandboxClaim"
	kindWarmPool = "SandboxWarmPool"
)

// ErrNotFound matches a name that is neither a SandboxClaim nor a Sandbox.
var ErrNotFound = errors.New("not found")

// NotFoundError says which name was looked up where.
type NotFoundError struct {
	Namespace, Name string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("sandbox %q not found in namespace %q", e.Name, e.Namespace)
}

// Is makes NotFoundError match ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// Target is what a name resolves to: a claim and the Sandbox bound to it
// (nil until bound), or a Sandbox that no claim owns.
type Target struct {
	Namespace string
	Claim     *extv1beta1.SandboxClaim
	Sandbox   *sandboxv1beta1.Sandbox
}

// Name is the name users refer to the target by: the claim's when there
// is one, else the Sandbox's.
func (t *Target) Name() string {
	if t.Claim != nil {
		return t.Claim.Name
	}
	return t.Sandbox.Name
}

// SandboxName is the bound Sandbox's name, "" while a claim is unbound.
func (t *Target) SandboxName() string {
	if t.Sandbox != nil {
		return t.Sandbox.Name
	}
	if t.Claim != nil {
		return t.Claim.Status.SandboxStatus.Name
	}
	return ""
}

// PodName is the name of the Sandbox's Pod: the pod-name annotation (warm
// pool members keep the Pod they were created with), else the Sandbox's
// name.
func (t *Target) PodName() string {
	if t.Sandbox == nil {
		return ""
	}
	return PodName(t.Sandbox)
}

// PodName returns the name of sb's Pod.
func PodName(sb *sandboxv1beta1.Sandbox) string {
	if n := sb.Annotations[labels.PodName]; n != "" {
		return n
	}
	return sb.Name
}

// Resolve looks name up in namespace: first as a SandboxClaim (then its
// bound Sandbox, if any), then as a Sandbox (then the claim that owns it,
// if any). A name matching neither is a *NotFoundError.
func Resolve(ctx context.Context, c client.Reader, namespace, name string) (*Target, error) {
	t := &Target{Namespace: namespace}
	var claim extv1beta1.SandboxClaim
	err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &claim)
	switch {
	case err == nil:
		t.Claim = &claim
		if sbName := claim.Status.SandboxStatus.Name; sbName != "" {
			sb, err := getSandbox(ctx, c, namespace, sbName)
			if err != nil {
				return nil, err
			}
			t.Sandbox = sb
		}
		return t, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("getting SandboxClaim %s/%s: %w", namespace, name, err)
	}
	sb, err := getSandbox(ctx, c, namespace, name)
	if err != nil {
		return nil, err
	}
	if sb == nil {
		return nil, &NotFoundError{Namespace: namespace, Name: name}
	}
	t.Sandbox = sb
	if ref := metav1.GetControllerOf(sb); ref != nil && ref.Kind == kindClaim {
		var owner extv1beta1.SandboxClaim
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, &owner)
		switch {
		case err == nil:
			t.Claim = &owner
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("getting SandboxClaim %s/%s: %w", namespace, ref.Name, err)
		}
	}
	return t, nil
}

// getSandbox returns the Sandbox, or nil when it does not exist.
func getSandbox(ctx context.Context, c client.Reader, namespace, name string) (*sandboxv1beta1.Sandbox, error) {
	var sb sandboxv1beta1.Sandbox
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("getting Sandbox %s/%s: %w", namespace, name, err)
	}
	return &sb, nil
}

// Owner classifies a Sandbox by its controller: the claim that holds it,
// the warm pool it waits in, or none (created directly).
func Owner(sb *sandboxv1beta1.Sandbox) (kind, name string) {
	if ref := metav1.GetControllerOf(sb); ref != nil {
		switch ref.Kind {
		case kindClaim, kindWarmPool:
			return ref.Kind, ref.Name
		}
	}
	return "", ""
}

// IsClaimKind reports whether kind (from Owner) is a SandboxClaim.
func IsClaimKind(kind string) bool { return kind == kindClaim }

// IsWarmPoolKind reports whether kind (from Owner) is a SandboxWarmPool.
func IsWarmPoolKind(kind string) bool { return kind == kindWarmPool }

package sandbox

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// extensionsGroup is the API group whose owners make a Sandbox part of a
// pool or a claim.
const extensionsGroup = "extensions.agents.x-k8s.io"

// ownedBy reports whether obj's controller reference is this Sandbox. The
// UID is authoritative: a tracking label alone never makes a child ours.
func ownedBy(obj metav1.Object, sb *sandboxv1beta1.Sandbox) bool {
	c := metav1.GetControllerOf(obj)
	return c != nil && c.UID == sb.UID
}

// foreignOwnerError describes a child controlled by someone else.
func foreignOwnerError(kind, name string, obj metav1.Object, sb *sandboxv1beta1.Sandbox) error {
	c := metav1.GetControllerOf(obj)
	return fmt.Errorf("%s %q is owned by %s/%s (UID: %s), not by sandbox %q", kind, name, c.Kind, c.Name, c.UID, sb.Name)
}

// adoptable reports whether an unowned child may be adopted: only with the
// explicit adoptable label or this Sandbox's tracking label.
func adoptable(obj metav1.Object, sb *sandboxv1beta1.Sandbox) bool {
	l := obj.GetLabels()
	return l[labels.Adoptable] == "true" || l[labels.SandboxNameHash] == labels.NameHash(sb.Name)
}

// extensionOwner returns the group/kind of the Sandbox's controller when it
// is an extensions kind (any version), so v1alpha1-era owners still count.
func extensionOwner(sb *sandboxv1beta1.Sandbox) (schema.GroupKind, bool) {
	c := metav1.GetControllerOf(sb)
	if c == nil {
		return schema.GroupKind{}, false
	}
	gv, err := schema.ParseGroupVersion(c.APIVersion)
	if err != nil || gv.Group != extensionsGroup {
		return schema.GroupKind{}, false
	}
	return schema.GroupKind{Group: gv.Group, Kind: c.Kind}, true
}

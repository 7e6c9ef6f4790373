// Package ownerref builds the controller owner references agent-sandbox
// puts on the objects it creates, so that every controller names an owner
// the same way: by UID (which is what the garbage collector and this
// project's ownership checks trust), with BlockOwnerDeletion so a
// foreground delete of the owner waits for its children.
package ownerref

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Controller is the controller reference to owner, whose kind is gvk.
func Controller(owner metav1.Object, gvk schema.GroupVersionKind) metav1.OwnerReference {
	return *metav1.NewControllerRef(owner, gvk)
}

// Sandbox is the reference a Sandbox's Pod, Service and PVCs carry.
func Sandbox(sb *sandboxv1beta1.Sandbox) metav1.OwnerReference {
	return Controller(sb, sandboxv1beta1.GroupVersion.WithKind("Sandbox"))
}

// Claim is the reference a claimed Sandbox carries.
func Claim(claim *extv1beta1.SandboxClaim) metav1.OwnerReference {
	return Controller(claim, extv1beta1.GroupVersion.WithKind("SandboxClaim"))
}

// WarmPool is the reference a warm pool's unclaimed Sandboxes carry.
// Deleting the pool deletes them through garbage collection.
func WarmPool(pool *extv1beta1.SandboxWarmPool) metav1.OwnerReference {
	return Controller(pool, extv1beta1.GroupVersion.WithKind("SandboxWarmPool"))
}

// Template is the reference a template's shared NetworkPolicy carries, so
// the policy goes with the template.
func Template(tmpl *extv1beta1.SandboxTemplate) metav1.OwnerReference {
	return Controller(tmpl, extv1beta1.GroupVersion.WithKind("SandboxTemplate"))
}

// Package index defines the informer-cache field indexes the extension
// controllers look objects up by, so that no reconcile Lists a namespace:
// Sandboxes by warm pool label and by controlling claim, pools by template
// and claims by pool.
package index

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

const (
	// SandboxWarmPool indexes Sandboxes by their warm-pool-sandbox label
	// value, NameHash(pool name).
	SandboxWarmPool = "ext.metadata.labels.warm-pool-sandbox"
	// SandboxControllerClaim indexes Sandboxes by the UID of the
	// SandboxClaim that controls them. It is how a claim finds its Sandbox
	// when its own status does not name it yet (e.g. after a crash between
	// adoption and the status write).
	SandboxControllerClaim = "ext.metadata.ownerReferences.controller.sandboxclaim"
	// WarmPoolTemplate indexes SandboxWarmPools by spec.sandboxTemplateRef.name.
	WarmPoolTemplate = ".spec.sandboxTemplateRef.name"
	// ClaimWarmPool indexes SandboxClaims by spec.warmPoolRef.name.
	ClaimWarmPool = ".spec.warmPoolRef.name"
)

// IsExtensionKind reports whether an owner reference points at kind of the
// extensions API group, whatever the version, so references written by older
// API versions still count.
func IsExtensionKind(ref *metav1.OwnerReference, kind string) bool {
	if ref == nil || ref.Kind != kind {
		return false
	}
	gv, err := parseGroup(ref.APIVersion)
	return err == nil && gv == extv1beta1.GroupVersion.Group
}

// ServedVersions are the API versions of the extensions group whose owner
// references are honoured: the current one and the published v1alpha1 that
// members created before an upgrade may still name. An owner reference is
// not validated by the apiserver, so anyone allowed to create a Sandbox can
// write any version; one the garbage collector cannot resolve (say
// "extensions.agents.x-k8s.io/v0nonexistent") must not make a Sandbox look
// like anyone's.
var ServedVersions = []string{extv1beta1.GroupVersion.Version, "v1alpha1"}

// IsServedExtensionRef is IsExtensionKind restricted to ServedVersions:
// the check for trust decisions (adoption), where a reference naming a
// version nobody serves is a forgery.
func IsServedExtensionRef(ref *metav1.OwnerReference, kind string) bool {
	if !IsExtensionKind(ref, kind) {
		return false
	}
	version := ref.APIVersion[len(extv1beta1.GroupVersion.Group)+1:]
	for _, v := range ServedVersions {
		if version == v {
			return true
		}
	}
	return false
}

func parseGroup(apiVersion string) (string, error) {
	for i := 0; i < len(apiVersion); i++ {
		if apiVersion[i] == '/' {
			return apiVersion[:i], nil
		}
	}
	return "", fmt.Errorf("apiVersion %q has no group", apiVersion)
}

// ControllerClaimUID returns the UID of the SandboxClaim controlling obj, or
// "".
func ControllerClaimUID(obj metav1.Object) string {
	ref := metav1.GetControllerOfNoCopy(obj)
	if IsExtensionKind(ref, "SandboxClaim") {
		return string(ref.UID)
	}
	return ""
}

// Register adds every index to indexer. Call it once per manager, before the
// manager starts.
func Register(ctx context.Context, indexer client.FieldIndexer) error {
	indexes := []struct {
		obj     client.Object
		field   string
		extract client.IndexerFunc
	}{
		{&sandboxv1beta1.Sandbox{}, SandboxWarmPool, func(o client.Object) []string {
			if v := o.GetLabels()[labels.WarmPoolSandbox]; v != "" {
				return []string{v}
			}
			return nil
		}},
		{&sandboxv1beta1.Sandbox{}, SandboxControllerClaim, func(o client.Object) []string {
			if uid := ControllerClaimUID(o); uid != "" {
				return []string{uid}
			}
			return nil
		}},
		{&extv1beta1.SandboxWarmPool{}, WarmPoolTemplate, func(o client.Object) []string {
			if n := o.(*extv1beta1.SandboxWarmPool).Spec.SandboxTemplateRef.Name; n != "" {
				return []string{n}
			}
			return nil
		}},
		{&extv1beta1.SandboxClaim{}, ClaimWarmPool, func(o client.Object) []string {
			if n := o.(*extv1beta1.SandboxClaim).Spec.WarmPoolRef.Name; n != "" {
				return []string{n}
			}
			return nil
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return fmt.Errorf("registering index %s: %w", ix.field, err)
		}
	}
	return nil
}

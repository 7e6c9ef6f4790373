// Package mergepatch builds the JSON merge patches (RFC 7386) the
// controllers send: metadata keys to set or remove, an optional
// resourceVersion precondition, and any spec or status fields. One
// builder keeps the two rules that are easy to get wrong in one place: a
// key is removed by sending null, and a patch that carries a
// resourceVersion fails with a conflict if the object changed since.
package mergepatch

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Meta is the metadata part of a patch. Empty parts are left out.
type Meta struct {
	// Labels and Annotations to set; a nil value removes the key.
	Labels, Annotations map[string]*string
	// OwnerReferences replaces the whole list when non-nil (merge patch
	// cannot append to a list).
	OwnerReferences []metav1.OwnerReference
	// ResourceVersion, when set, makes the patch conditional on the
	// object being unchanged since it was read.
	ResourceVersion string
	// ResetManagedFields clears metadata.managedFields (the apiserver's
	// documented reset: a list holding one empty entry). The apiserver
	// records no field ownership for updates of an object without
	// managedFields until someone server-side applies it, so this write and
	// every later update of the object skip the field-ownership diff, the
	// costliest step of a custom resource update after decoding.
	ResetManagedFields bool
}

// Patch is one merge patch.
type Patch struct {
	Meta Meta
	// Fields are other top-level fields (spec, status), sent as given.
	Fields map[string]any
}

// Empty reports whether the patch would change nothing.
func (p Patch) Empty() bool {
	m := p.Meta
	return len(m.Labels) == 0 && len(m.Annotations) == 0 && m.OwnerReferences == nil && len(p.Fields) == 0
}

// Marshal renders the patch.
func (p Patch) Marshal() ([]byte, error) {
	body := make(map[string]any, len(p.Fields)+1)
	for k, v := range p.Fields {
		body[k] = v
	}
	meta := map[string]any{}
	if len(p.Meta.Labels) > 0 {
		meta["labels"] = p.Meta.Labels
	}
	if len(p.Meta.Annotations) > 0 {
		meta["annotations"] = p.Meta.Annotations
	}
	if p.Meta.OwnerReferences != nil {
		meta["ownerReferences"] = p.Meta.OwnerReferences
	}
	if p.Meta.ResourceVersion != "" {
		meta["resourceVersion"] = p.Meta.ResourceVersion
	}
	if p.Meta.ResetManagedFields {
		meta["managedFields"] = []map[string]any{{}}
	}
	if len(meta) > 0 {
		body["metadata"] = meta
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding merge patch: %w", err)
	}
	return data, nil
}

// Client renders the patch for client.Patch.
func (p Patch) Client() (client.Patch, error) {
	data, err := p.Marshal()
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// Set is a label or annotation value to set, for Meta's maps.
func Set(v string) *string { return &v }

package v1alpha1

import (
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/conversion"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/api/internal/convstate"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

const (
	// SandboxClaimStateAnnotation is set on a v1beta1 claim converted from
	// v1alpha1 when its template and warm pool policy cannot be inferred
	// back from warmPoolRef (e.g. "warmpool: none"). The value is a JSON
	// v1alpha1 claim; the reference implementation stores the whole object,
	// which decodes the same way.
	SandboxClaimStateAnnotation = "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state"
	// SandboxClaimHubStateAnnotation keeps, on a v1alpha1 claim, the v1beta1
	// fields v1alpha1 cannot hold (volume claim templates, a warmPoolRef
	// that the v1alpha1 fields would not imply).
	SandboxClaimHubStateAnnotation = "api.agents.x-k8s.io/v1beta1-sandboxclaim-state"
	// ShadowPoolPrefix prefixes the pool that stands for "the template's
	// cold start" in v1beta1: a v1alpha1 claim without a specific pool maps
	// to warmPoolRef shadow-pool-<template>. The migration tool creates
	// these pools with replicas 0.
	ShadowPoolPrefix = "shadow-pool-"
)

// claimState is the part of a v1alpha1 claim the hub cannot represent.
type claimState struct {
	Spec struct {
		SandboxTemplateRef *SandboxTemplateRef `json:"sandboxTemplateRef,omitempty"`
		WarmPool           string              `json:"warmpool,omitempty"`
	} `json:"spec"`
}

// claimHubState is the part of a v1beta1 claim v1alpha1 cannot represent.
// WarmPoolRef applies only while the v1alpha1 fields still hold the values
// they were converted to (Template, WarmPool): a v1alpha1 writer that changes
// them gets the warm pool its new values imply.
type claimHubState struct {
	WarmPoolRef          *string                                        `json:"warmPoolRef,omitempty"`
	Template             string                                         `json:"template,omitempty"`
	WarmPool             string                                         `json:"warmpool,omitempty"`
	VolumeClaimTemplates []sandboxv1beta1.PersistentVolumeClaimTemplate `json:"volumeClaimTemplates,omitempty"`
}

var _ conversion.Convertible = &SandboxClaim{}

// ConvertTo converts this v1alpha1 claim to the v1beta1 hub (KEP-208): the
// warm pool is the named pool, else the pool a warm-adopted Sandbox came
// from, else the template's shadow pool.
func (c *SandboxClaim) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*extv1beta1.SandboxClaim)
	if !ok {
		return fmt.Errorf("converting v1alpha1 SandboxClaim: unexpected hub type %T", dstRaw)
	}
	meta := c.ObjectMeta.DeepCopy()
	var hub claimHubState
	if _, err := convstate.Take(&meta.Annotations, SandboxClaimHubStateAnnotation, &hub); err != nil {
		return fmt.Errorf("converting SandboxClaim %s/%s to v1beta1: %w", c.Namespace, c.Name, err)
	}
	convstate.Drop(&meta.Annotations, SandboxClaimStateAnnotation)

	pool := InferWarmPoolRef(c.Name, c.Spec.SandboxTemplateRef.Name, c.Spec.WarmPool, c.Status.SandboxStatus.Name)
	if hub.WarmPoolRef != nil && hub.Template == c.Spec.SandboxTemplateRef.Name && hub.WarmPool == c.Spec.WarmPool {
		pool = *hub.WarmPoolRef
	}
	spec := c.Spec.DeepCopy()
	dst.ObjectMeta = *meta
	dst.Spec = extv1beta1.SandboxClaimSpec{
		WarmPoolRef:           extv1beta1.WarmPoolRef{Name: pool},
		Lifecycle:             spec.Lifecycle,
		AdditionalPodMetadata: spec.AdditionalPodMetadata,
		Env:                   spec.Env,
		VolumeClaimTemplates:  hub.VolumeClaimTemplates,
	}
	dst.Status = *c.Status.DeepCopy()

	// Keep what warmPoolRef alone would not give back.
	if tmpl, wp := SpokeFromWarmPoolRef(pool); tmpl != c.Spec.SandboxTemplateRef.Name || wp != c.Spec.WarmPool {
		var st claimState
		st.Spec.SandboxTemplateRef = &SandboxTemplateRef{Name: c.Spec.SandboxTemplateRef.Name}
		st.Spec.WarmPool = c.Spec.WarmPool
		if err := convstate.Put(&dst.Annotations, SandboxClaimStateAnnotation, st); err != nil {
			return fmt.Errorf("converting SandboxClaim %s/%s to v1beta1: %w", c.Namespace, c.Name, err)
		}
	}
	return nil
}

// ConvertFrom converts the v1beta1 hub to this v1alpha1 claim. A shadow pool
// gives its template and "warmpool: default"; any other pool gives
// "warmpool: <pool>". The stored v1alpha1 state restores the original
// template and policy while warmPoolRef still matches them.
func (c *SandboxClaim) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*extv1beta1.SandboxClaim)
	if !ok {
		return fmt.Errorf("converting to v1alpha1 SandboxClaim: unexpected hub type %T", srcRaw)
	}
	meta := src.ObjectMeta.DeepCopy()
	var st claimState
	found, err := convstate.Take(&meta.Annotations, SandboxClaimStateAnnotation, &st)
	if err != nil {
		// Advisory state any v1beta1 writer can set: a bad value must not
		// make the claim (or a list containing it) unreadable as v1alpha1.
		found = false
	}
	convstate.Drop(&meta.Annotations, SandboxClaimHubStateAnnotation)

	pool := src.Spec.WarmPoolRef.Name
	bound := src.Status.SandboxStatus.Name
	tmpl, wp := SpokeFromWarmPoolRef(pool)
	if found && st.Spec.SandboxTemplateRef != nil {
		origTmpl, origWP := st.Spec.SandboxTemplateRef.Name, st.Spec.WarmPool
		switch {
		case pool == origWP, pool == ShadowPoolPrefix+origTmpl,
			bound != "" && (pool == bound || pool == stripGeneratedSuffix(bound)):
			tmpl, wp = origTmpl, origWP
		default:
			// A v1beta1 writer moved the claim to another pool: the policy
			// follows the hub, the template falls back to the original.
			tmpl = origTmpl
		}
	}
	spec := src.Spec.DeepCopy()
	c.ObjectMeta = *meta
	c.Spec = SandboxClaimSpec{
		SandboxTemplateRef:    SandboxTemplateRef{Name: tmpl},
		WarmPool:              wp,
		Lifecycle:             spec.Lifecycle,
		AdditionalPodMetadata: spec.AdditionalPodMetadata,
		Env:                   spec.Env,
	}
	c.Status = *src.Status.DeepCopy()

	hub := claimHubState{VolumeClaimTemplates: spec.VolumeClaimTemplates}
	if InferWarmPoolRef(src.Name, tmpl, wp, bound) != pool {
		hub.WarmPoolRef, hub.Template, hub.WarmPool = &pool, tmpl, wp
	}
	if hub.WarmPoolRef != nil || len(hub.VolumeClaimTemplates) > 0 {
		if err := convstate.Put(&c.Annotations, SandboxClaimHubStateAnnotation, hub); err != nil {
			return fmt.Errorf("converting SandboxClaim %s/%s to v1alpha1: %w", src.Namespace, src.Name, err)
		}
	}
	return nil
}

// InferWarmPoolRef is the v1beta1 warmPoolRef of a v1alpha1 claim:
//  1. a specific pool in warmpool (not none/default/empty) is that pool;
//  2. else a bound Sandbox named differently from the claim was adopted
//     from a pool, whose name is the Sandbox name without its generated
//     suffix;
//  3. else (cold start, or nothing bound yet) the template's shadow pool.
func InferWarmPoolRef(claimName, template, warmpool, boundSandbox string) string {
	switch {
	case warmpool != "" && warmpool != WarmPoolPolicyNone && warmpool != WarmPoolPolicyDefault:
		return warmpool
	case boundSandbox != "" && boundSandbox != claimName:
		return stripGeneratedSuffix(boundSandbox)
	default:
		return ShadowPoolPrefix + template
	}
}

// SpokeFromWarmPoolRef is the v1alpha1 template and warm pool policy a
// warmPoolRef implies without stored state: a shadow pool is its template
// with "default"; another pool is itself for both (the pool's template is not
// known to a conversion).
func SpokeFromWarmPoolRef(pool string) (template, warmpool string) {
	if rest, ok := strings.CutPrefix(pool, ShadowPoolPrefix); ok {
		return rest, WarmPoolPolicyDefault
	}
	return pool, pool
}

// stripGeneratedSuffix drops the last "-xxxxx" of a name made from a
// generateName prefix.
func stripGeneratedSuffix(name string) string {
	if i := strings.LastIndex(name, "-"); i > 0 {
		return name[:i]
	}
	return name
}

// Package migrate moves a cluster from the v1alpha1 API to v1beta1 in two
// phases, the ones the reference's migrate.sh has:
//
//   - Bootstrap, before the upgrade: a v1beta1 claim names a warm pool, not a
//     template, so every v1alpha1 claim that starts cold (warmpool none or
//     default, nothing adopted from a pool) will convert to warmPoolRef
//     shadow-pool-<template>. Bootstrap creates those pools with replicas 0
//     (cold start from the template) so the converted claims find them.
//   - Migrate, after the upgrade: rewrite every object once (a metadata patch
//     stamping agents.x-k8s.io/storage-migrated-at) so etcd holds v1beta1
//     only, then record v1beta1 as the CRDs' only stored version.
//
// Both phases are idempotent and have a dry run. Objects are handled as
// unstructured so the tool works against either controller version.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1alpha1 "sigs.k8s.io/agent-sandbox/api/extensions/v1alpha1"
)

// Annotations of the migration bookkeeping (spec §1.9).
const (
	AnnotationShadow         = "agents.x-k8s.io/migration-shadow"
	AnnotationSourceTemplate = "agents.x-k8s.io/migration-source-template"
	AnnotationMigratedAt     = "agents.x-k8s.io/storage-migrated-at"
)

const extGroup = "extensions.agents.x-k8s.io"

// Kinds are the migrated kinds with their CRDs, in rewrite order.
var Kinds = []struct {
	GVK schema.GroupVersionKind
	CRD string
}{
	{schema.GroupVersionKind{Group: extGroup, Version: "v1beta1", Kind: "SandboxTemplate"}, "sandboxtemplates.extensions.agents.x-k8s.io"},
	{schema.GroupVersionKind{Group: extGroup, Version: "v1beta1", Kind: "SandboxWarmPool"}, "sandboxwarmpools.extensions.agents.x-k8s.io"},
	{schema.GroupVersionKind{Group: "agents.x-k8s.io", Version: "v1beta1", Kind: "Sandbox"}, "sandboxes.agents.x-k8s.io"},
	{schema.GroupVersionKind{Group: extGroup, Version: "v1beta1", Kind: "SandboxClaim"}, "sandboxclaims.extensions.agents.x-k8s.io"},
}

// Options of a phase.
type Options struct {
	// Namespace limits the phase to one namespace; empty means all.
	Namespace string
	// DryRun reports what would change and changes nothing (writes go to
	// the apiserver with dryRun=All, so they are still validated).
	DryRun bool
	// Out receives one line per action.
	Out io.Writer
	// Now stamps storage-migrated-at (tests).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) writeOpts() []client.CreateOption {
	if o.DryRun {
		return []client.CreateOption{client.DryRunAll}
	}
	return nil
}

func (o *Options) prefix() string {
	if o.DryRun {
		return "(dry run) "
	}
	return ""
}

// ShadowPool is a pool Bootstrap creates.
type ShadowPool struct {
	Namespace, Name, Template string
}

// Bootstrap creates the shadow pool of every (namespace, template) used by a
// cold-start v1alpha1 claim. A pool of that name that already exists is left
// alone (a shadow pool from an earlier run, or the user's own pool, which
// the converted claims will then use). It returns the pools it created (or
// would create, in a dry run).
func Bootstrap(ctx context.Context, c client.Client, o Options) ([]ShadowPool, error) {
	o.defaults()
	claims := &unstructured.UnstructuredList{}
	claims.SetGroupVersionKind(schema.GroupVersionKind{Group: extGroup, Version: "v1alpha1", Kind: "SandboxClaimList"})
	if err := c.List(ctx, claims, client.InNamespace(o.Namespace)); err != nil {
		return nil, fmt.Errorf("listing v1alpha1 SandboxClaims: %w", err)
	}
	var want []ShadowPool
	for _, cl := range claims.Items {
		template, _, _ := unstructured.NestedString(cl.Object, "spec", "sandboxTemplateRef", "name")
		warmpool, _, _ := unstructured.NestedString(cl.Object, "spec", "warmpool")
		bound, _, _ := unstructured.NestedString(cl.Object, "status", "sandbox", "name")
		pool := extv1alpha1.InferWarmPoolRef(cl.GetName(), template, warmpool, bound)
		if pool != extv1alpha1.ShadowPoolPrefix+template || template == "" {
			continue
		}
		sp := ShadowPool{Namespace: cl.GetNamespace(), Name: pool, Template: template}
		if !slices.Contains(want, sp) {
			want = append(want, sp)
		}
	}
	var created []ShadowPool
	var errs []error
	for _, sp := range want {
		if msgs := validation.IsDNS1123Subdomain(sp.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("template %s/%s: shadow pool name %q is not valid (%s); rename the template or give its claims a warmpool",
				sp.Namespace, sp.Template, sp.Name, msgs[0]))
			continue
		}
		existing := &unstructured.Unstructured{}
		existing.SetGroupVersionKind(schema.GroupVersionKind{Group: extGroup, Version: "v1alpha1", Kind: "SandboxWarmPool"})
		err := c.Get(ctx, types.NamespacedName{Namespace: sp.Namespace, Name: sp.Name}, existing)
		if err == nil {
			if existing.GetAnnotations()[AnnotationShadow] == "true" {
				fmt.Fprintf(o.Out, "shadow pool %s/%s exists\n", sp.Namespace, sp.Name)
			} else {
				fmt.Fprintf(o.Out, "pool %s/%s exists and is not a shadow pool; claims of template %s will use it\n", sp.Namespace, sp.Name, sp.Template)
			}
			continue
		}
		if !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("reading pool %s/%s: %w", sp.Namespace, sp.Name, err))
			continue
		}
		pool := shadowPool(sp)
		if err := c.Create(ctx, pool, o.writeOpts()...); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue // created concurrently: fine, that is the goal
			}
			errs = append(errs, fmt.Errorf("creating shadow pool %s/%s: %w", sp.Namespace, sp.Name, err))
			continue
		}
		fmt.Fprintf(o.Out, "%screated shadow pool %s/%s (template %s, replicas 0)\n", o.prefix(), sp.Namespace, sp.Name, sp.Template)
		created = append(created, sp)
	}
	return created, errors.Join(errs...)
}

// shadowPool is a v1alpha1 pool, which both the old and the new controller
// serve: replicas 0 means every claim of it starts cold from the template.
func shadowPool(sp ShadowPool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"replicas":           int64(0),
			"sandboxTemplateRef": map[string]any{"name": sp.Template},
		},
	}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: extGroup, Version: "v1alpha1", Kind: "SandboxWarmPool"})
	u.SetNamespace(sp.Namespace)
	u.SetName(sp.Name)
	u.SetAnnotations(map[string]string{AnnotationShadow: "true", AnnotationSourceTemplate: sp.Template})
	return u
}

// MigrateResult counts what Migrate did.
type MigrateResult struct {
	Rewritten, AlreadyMigrated int
	// StoredVersionsPruned lists the CRDs whose status.storedVersions was
	// reduced to v1beta1.
	StoredVersionsPruned []string
}

// Migrate rewrites every object of the four kinds that has no
// storage-migrated-at annotation yet, then, for CRDs where every object was
// rewritten (and only when running over all namespaces), sets
// status.storedVersions to [v1beta1] so v1alpha1 can later be dropped.
func Migrate(ctx context.Context, c client.Client, o Options) (MigrateResult, error) {
	o.defaults()
	var res MigrateResult
	var errs []error
	stamp := o.Now().UTC().Format(time.RFC3339)
	for _, k := range Kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
		if err := c.List(ctx, list, client.InNamespace(o.Namespace)); err != nil {
			if apierrors.IsNotFound(err) || isNoMatch(err) {
				fmt.Fprintf(o.Out, "%s: not installed, skipped\n", k.GVK.Kind)
				continue
			}
			errs = append(errs, fmt.Errorf("listing %s: %w", k.GVK.Kind, err))
			continue
		}
		kindErrs := 0
		for i := range list.Items {
			obj := &list.Items[i]
			if _, ok := obj.GetAnnotations()[AnnotationMigratedAt]; ok {
				res.AlreadyMigrated++
				continue
			}
			// A merge patch of metadata alone: the apiserver decodes the
			// stored object, converts it and writes it back in the storage
			// version. Spec and status are untouched, so no Pod restarts.
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationMigratedAt, stamp)
			var popts []client.PatchOption
			if o.DryRun {
				popts = append(popts, client.DryRunAll)
			}
			if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), popts...); err != nil {
				if apierrors.IsNotFound(err) {
					continue // deleted meanwhile: nothing left to migrate
				}
				kindErrs++
				errs = append(errs, fmt.Errorf("rewriting %s %s/%s: %w", k.GVK.Kind, obj.GetNamespace(), obj.GetName(), err))
				continue
			}
			fmt.Fprintf(o.Out, "%srewrote %s %s/%s\n", o.prefix(), k.GVK.Kind, obj.GetNamespace(), obj.GetName())
			res.Rewritten++
		}
		if kindErrs > 0 || o.Namespace != "" {
			continue
		}
		pruned, err := pruneStoredVersions(ctx, c, k.CRD, k.GVK.Version, o)
		if err != nil {
			errs = append(errs, err)
		} else if pruned {
			res.StoredVersionsPruned = append(res.StoredVersionsPruned, k.CRD)
		}
	}
	return res, errors.Join(errs...)
}

// pruneStoredVersions records that etcd holds only version for crd. Done
// only after every object was rewritten: the apiserver trusts this list
// when a version is later removed from the CRD.
func pruneStoredVersions(ctx context.Context, c client.Client, name, version string, o Options) (bool, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
		return false, fmt.Errorf("reading CRD %s: %w", name, err)
	}
	if slices.Equal(crd.Status.StoredVersions, []string{version}) {
		return false, nil
	}
	if !slices.Contains(crd.Status.StoredVersions, version) {
		return false, fmt.Errorf("CRD %s: storedVersions %v lacks %s; is the upgraded CRD installed?", name, crd.Status.StoredVersions, version)
	}
	patch := fmt.Appendf(nil, `{"status":{"storedVersions":[%q]}}`, version)
	var popts []client.SubResourcePatchOption
	if o.DryRun {
		popts = append(popts, client.DryRunAll)
	}
	if err := c.Status().Patch(ctx, crd, client.RawPatch(types.MergePatchType, patch), popts...); err != nil {
		return false, fmt.Errorf("setting storedVersions of CRD %s: %w", name, err)
	}
	fmt.Fprintf(o.Out, "%sCRD %s: storedVersions %v -> [%s]\n", o.prefix(), name, crd.Status.StoredVersions, version)
	return true, nil
}

package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager of everything Up applies.
const FieldManager = "agent-sandbox-up"

// runtimeClasses are the two runtimes every node offers.
const runtimeClasses = `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
handler: runsc
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: runc
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
handler: runc
`

// ApplyManifests server-side applies every object in the given YAML/JSON
// files and directories (recursively, *.yaml, *.yml, *.json, in name order).
// Namespaces and CustomResourceDefinitions go first, and the CRDs are
// waited for, so a directory may hold CRDs and objects of their kinds.
func ApplyManifests(ctx context.Context, cfg *rest.Config, paths ...string) error {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		files, err := manifestFiles(p)
		if err != nil {
			return err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("read manifest: %w", err)
			}
			o, err := decodeManifests(data)
			if err != nil {
				return fmt.Errorf("manifest %s: %w", f, err)
			}
			objs = append(objs, o...)
		}
	}
	return applyObjects(ctx, cfg, objs)
}

// ApplyYAML is ApplyManifests for in-memory YAML.
func ApplyYAML(ctx context.Context, cfg *rest.Config, data []byte) error {
	objs, err := decodeManifests(data)
	if err != nil {
		return err
	}
	return applyObjects(ctx, cfg, objs)
}

func manifestFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("manifest path: %w", err)
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch strings.ToLower(filepath.Ext(f)) {
		case ".yaml", ".yml", ".json":
			if !d.IsDir() && filepath.Base(f) != "kustomization.yaml" {
				files = append(files, f)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", p, err)
	}
	slices.Sort(files)
	return files, nil
}

// decodeManifests splits multi-document YAML (or JSON) into objects; empty
// documents and List kinds are handled.
func decodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			list, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("decode list: %w", err)
			}
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("object without apiVersion/kind: %v", m)
		}
		out = append(out, u)
	}
}

func applyRank(u *unstructured.Unstructured) int {
	switch u.GetKind() {
	case "Namespace":
		return 0
	case "CustomResourceDefinition":
		return 1
	default:
		return 2
	}
}

func applyObjects(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	if len(objs) == 0 {
		return nil
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return applyRank(a) - applyRank(b) })
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	var crds []string
	for i, u := range objs {
		if applyRank(u) == 2 && i > 0 && applyRank(objs[i-1]) < 2 && len(crds) > 0 {
			// First object after the CRDs: wait until they serve, then
			// forget cached discovery so their kinds resolve.
			if err := waitCRDsEstablished(ctx, dyn, crds); err != nil {
				return err
			}
			cached.Invalidate()
			mapper.Reset()
		}
		if err := applyOne(ctx, dyn, mapper, u); err != nil {
			return err
		}
		if u.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, u.GetName())
		}
	}
	return nil
}

func applyOne(ctx context.Context, dyn dynamic.Interface, mapper meta.ResettableRESTMapper, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	var mapping *meta.RESTMapping
	// A kind from a CRD applied moments ago may take a little while to show
	// up in discovery.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			return false, nil //nolint:nilerr // not in discovery yet: poll on with a fresh mapper
		}
		mapping = m
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("apply %s %s: unknown kind %s", gvk.Kind, u.GetName(), gvk)
	}
	data, err := u.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := u.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		ri = dyn.Resource(mapping.Resource).Namespace(ns)
	}
	force := true
	if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
		return fmt.Errorf("apply %s %s: %w", gvk.Kind, u.GetName(), err)
	}
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func waitCRDsEstablished(ctx context.Context, dyn dynamic.Interface, names []string) error {
	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // not visible yet: poll on until the timeout
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", n, err)
		}
	}
	return nil
}

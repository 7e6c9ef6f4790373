package localcluster

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestDecodeManifestsOrdersNamespacesAndCRDsFirst(t *testing.T) {
	objs, err := decodeManifests([]byte(`
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
# comment only
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sandboxes.agents.x-k8s.io}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: ns}}
`))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return applyRank(a) - applyRank(b) })
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	if want := []string{"Namespace", "CustomResourceDefinition", "ConfigMap"}; !slices.Equal(kinds, want) {
		t.Errorf("order = %v, want %v", kinds, want)
	}
	if _, err := decodeManifests([]byte("metadata: {name: x}\n")); err == nil {
		t.Error("an object without kind was accepted")
	}
}

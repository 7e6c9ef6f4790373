package sandbox

import (
	"reflect"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// sandboxChanged passes Sandbox updates that can change what this
// controller does: spec (generation), labels, annotations, owner
// references and deletion. Our own status writes do not wake us again.
func sandboxChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return o.GetGeneration() != n.GetGeneration() ||
				!reflect.DeepEqual(o.GetLabels(), n.GetLabels()) ||
				!reflect.DeepEqual(o.GetAnnotations(), n.GetAnnotations()) ||
				!reflect.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences()) ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
		},
	}
}

package warmpool

import (
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func names(items []sandboxv1beta1.Sandbox) []string {
	out := make([]string, 0, len(items))
	for _, s := range items {
		out = append(out, s.Name)
	}
	return out
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func expectNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("want NotFound, got %v", err)
}

func reqFor(ns, name string) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}
}

// DefaultReadinessGrace is the default grace period.
func DefaultReadinessGrace() time.Duration {
	var o Options
	o.defaults()
	return o.ReadinessGracePeriod
}

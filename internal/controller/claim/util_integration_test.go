package claim_test

import (
	"context"
	"fmt"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

type testErr struct{ msg string }

func (e *testErr) Error() string { return e.msg }

var sprintf = fmt.Sprintf

// reconcileErrors is controller_runtime_reconcile_errors_total of the claim
// controller, across every manager this test binary started.
func reconcileErrors(t *testing.T) float64 {
	t.Helper()
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range fams {
		if f.GetName() != "controller_runtime_reconcile_errors_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "sandboxclaim" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

type eventsList struct{}

// expect reports an error unless an event with reason exists about the
// named object of kind.
func (eventsList) expect(w *world, kind, name, reason string) error {
	var evs eventsv1.EventList
	if err := w.c.List(context.Background(), &evs, client.InNamespace(w.ns)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			return nil
		}
	}
	return fmt.Errorf("no %s event for %s %s among %d events", reason, kind, name, len(evs.Items))
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func rawPatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

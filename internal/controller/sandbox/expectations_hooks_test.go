package sandbox

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// pendingWrites lists the controller's unobserved child writes of a Sandbox.
func pendingWrites(ns, name string, uid types.UID) []string {
	return suiteReconciler.exp.Pending(sandboxKey(ns, name), uid)
}

// setExpectationsClock replaces the clock the controller's expectations
// time out by.
func setExpectationsClock(now func() time.Time) { suiteReconciler.exp.SetClock(now) }

// Package sandbox owns the Sandbox controller: for each Sandbox it keeps one
// Pod with the Sandbox's name, an optional headless Service and the PVCs of
// its volume claim templates, suspends and resumes by deleting and
// recreating the Pod, expires Sandboxes at their shutdown time and reports
// all of it in status conditions.
//
// Each concern has its own file: pod.go, podmeta.go, service.go, pvc.go,
// expiry.go, conditions.go, status.go; handler.go feeds the expectations
// that keep a pass on a lagging cache from writing a child twice.
// controller.go reads as the story of a reconcile pass.
package sandbox

package v1beta1

// Condition types of a Sandbox.
const (
	SandboxConditionReady        = "Ready"
	SandboxConditionSuspended    = "Suspended"
	SandboxConditionPodScheduled = "PodScheduled"
	SandboxConditionFinished     = "Finished"
)

// Condition reasons of a Sandbox. The strings are part of the API: clients
// and dashboards match on them.
const (
	ReasonDependenciesReady    = "DependenciesReady"
	ReasonDependenciesNotReady = "DependenciesNotReady"
	ReasonSandboxSuspended     = "SandboxSuspended"
	ReasonPodSucceeded         = "PodSucceeded"
	ReasonPodFailed            = "PodFailed"
	ReasonSandboxExpired       = "SandboxExpired"
	ReasonMultiplePods         = "MultiplePods"
	ReasonReconcilerError      = "ReconcilerError"

	ReasonNotSuspended    = "NotSuspended"
	ReasonPodTerminating  = "PodTerminating"
	ReasonPodNotOwned     = "PodNotOwned"
	ReasonPodStateUnknown = "PodStateUnknown"
	ReasonPodTerminated   = "PodTerminated"

	// ReasonPodNotTerminated is deprecated; PodTerminating replaced it. It is
	// kept so code written against the older API still compiles.
	ReasonPodNotTerminated = "PodNotTerminated"

	ReasonPodScheduled         = "PodScheduled"
	ReasonPodSchedulingUnknown = "PodSchedulingUnknown"
)

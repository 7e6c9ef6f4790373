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

// Deep hibernation (an agent-sandbox extension, controller flag
// --deep-hibernation): condition type MemorySnapshot says what happened to
// the processes' memory at the last suspend and resume.
const (
	SandboxConditionMemorySnapshot = "MemorySnapshot"

	// True: a checkpoint was saved at suspend (status.memorySnapshot).
	ReasonMemorySnapshotSaved = "MemorySnapshotSaved"
	// False: the checkpoint failed or timed out; the suspend kept only the
	// volumes, as without deep hibernation.
	ReasonCheckpointFailed = "CheckpointFailed"
	// False: the resumed Pod was restored; its processes went on.
	ReasonRestoredFromSnapshot = "RestoredFromSnapshot"
	// False: the snapshot was missing, corrupt or from another runtime
	// version; the Pod started clean with its volumes.
	ReasonSnapshotRestoreFailed = "SnapshotRestoreFailed"
	// False: the resumed Pod did not report a restore result in time (no
	// node agent, or the Pod never started on the snapshot's node); the
	// snapshot is not used again and a Pod that never started is
	// recreated clean.
	ReasonSnapshotRestoreUnknown = "SnapshotRestoreUnknown"
)

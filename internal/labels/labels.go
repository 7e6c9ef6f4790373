package labels

import (
	"sort"
	"strings"
)

// Labels set by the controllers.
const (
	// SandboxNameHash identifies the Pod, Service and PVCs of a Sandbox; it
	// is the Service selector, so it must never be user-settable.
	SandboxNameHash = "agents.x-k8s.io/sandbox-name-hash"
	// LaunchType is "warm" or "cold".
	LaunchType = "agents.x-k8s.io/launch-type"
	// CreatedBy names the client that created an object.
	CreatedBy = "agents.x-k8s.io/created-by"
	// SandboxPodTemplateHash is deprecated: the hash of the template's pod
	// template.
	SandboxPodTemplateHash = "agents.x-k8s.io/sandbox-pod-template-hash"
	// SandboxTemplateHash is the hash of a template's blueprint; the warm
	// pool's staleness key.
	SandboxTemplateHash = "agents.x-k8s.io/sandbox-template-hash"
	// Adoptable set to "true" lets a Sandbox adopt an unowned resource with
	// its name.
	Adoptable = "agents.x-k8s.io/adoptable"
	// WarmPoolSandbox holds NameHash(pool) on pool members and their Pods.
	WarmPoolSandbox = "agents.x-k8s.io/warm-pool-sandbox"
	// SandboxTemplateRefHash holds NameHash(template); NetworkPolicy selector.
	SandboxTemplateRefHash = "agents.x-k8s.io/sandbox-template-ref-hash"
	// ClaimUID holds the UID of the claim that owns a Sandbox.
	ClaimUID = "agents.x-k8s.io/claim-uid"
)

// Annotations set by the controllers or clients.
const (
	PodName                      = "agents.x-k8s.io/pod-name"
	SandboxTemplateRef           = "agents.x-k8s.io/sandbox-template-ref"
	PropagatedLabels             = "agents.x-k8s.io/propagated-labels"
	PropagatedAnnotations        = "agents.x-k8s.io/propagated-annotations"
	SandboxName                  = "agents.x-k8s.io/sandbox-name"
	ControllerFirstObservedAt    = "agents.x-k8s.io/controller-first-observed-at"
	ClientFirstRequestedAt       = "agents.x-k8s.io/client-first-requested-at"
	WebhookFirstObservedAt       = "agents.x-k8s.io/webhook-first-observed-at"
	ClaimFirstReadyAt            = "agents.x-k8s.io/claim-first-ready-at"
	CreationLatencyRecorded      = "agents.x-k8s.io/creation-latency-recorded"
	TraceContext                 = "opentelemetry.io/trace-context"
	SafeToEvict                  = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	MigrationShadow              = "agents.x-k8s.io/migration-shadow"
	MigrationSourceTemplate      = "agents.x-k8s.io/migration-source-template"
	StorageMigratedAt            = "agents.x-k8s.io/storage-migrated-at"
	V1alpha1SandboxState         = "api.agents.x-k8s.io/v1alpha1-sandbox-state"
	V1alpha1SandboxClaimState    = "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state"
	V1alpha1SandboxTemplateState = "api.agents.x-k8s.io/v1alpha1-sandboxtemplate-state"
	V1alpha1SandboxWarmPoolState = "api.agents.x-k8s.io/v1alpha1-sandboxwarmpool-state"
	V1beta1VCTPolicy             = "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy"
)

// Values of LaunchType and CreatedBy.
const (
	LaunchTypeWarm = "warm"
	LaunchTypeCold = "cold"

	CreatedByGoClient     = "go-client"
	CreatedByPythonClient = "python-client"
	// CreatedByTypeScriptClient is this project's TypeScript SDK (an
	// addition: the reference knows only the Go and Python clients).
	CreatedByTypeScriptClient = "typescript-client"
	CreatedByController       = "controller"
	CreatedByUnknown          = "unknown"
)

// ClaimFirstReadyUnknown marks a claim whose first Ready time was never
// recorded, so its latency is not counted twice.
const ClaimFirstReadyUnknown = "unknown"

// System-reserved prefixes: keys under them are never copied from a user's
// pod template to a Pod, so a tenant cannot spoof identity labels.
const (
	systemPrefix           = "agents.x-k8s.io/"
	extensionsSystemPrefix = "extensions.agents.x-k8s.io/"
)

// IsSystemKey reports whether a label or annotation key is reserved for the
// controllers.
func IsSystemKey(key string) bool {
	return strings.HasPrefix(key, systemPrefix) ||
		strings.HasPrefix(key, extensionsSystemPrefix) ||
		key == TraceContext
}

// UserKeys returns the entries of a label or annotation map whose keys are
// not system-reserved: what a user's pod template may pass on to a Pod, so
// that a tenant cannot copy identity labels (for example the Service
// selector) of another Sandbox. The result is a new map, never nil, which
// the caller may change.
func UserKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !IsSystemKey(k) {
			out[k] = v
		}
	}
	return out
}

// NormalizeCreatedBy maps a created-by value to one of the known clients, or
// "unknown", so that metrics labels stay bounded.
func NormalizeCreatedBy(v string) string {
	switch v {
	case CreatedByGoClient, CreatedByPythonClient, CreatedByTypeScriptClient, CreatedByController:
		return v
	default:
		return CreatedByUnknown
	}
}

// JoinKeys renders a sorted, comma-joined list of keys, the format of the
// propagated-labels and propagated-annotations tracking annotations.
func JoinKeys(keys []string) string {
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	return strings.Join(sorted, ",")
}

// SplitKeys parses a tracking annotation written by JoinKeys.
func SplitKeys(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Package metrics defines the Prometheus metrics of the controllers, named
// as in the published API so existing dashboards and HPA rules keep working,
// and registers them into controller-runtime's registry (served on
// /metrics by the manager).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Label values shared by the claim metrics.
const (
	LaunchTypeWarm    = "warm"
	LaunchTypeCold    = "cold"
	LaunchTypeUnknown = "unknown"

	// UnknownTemplate is the sandbox_template value when the Sandbox names
	// no template.
	UnknownTemplate = "__unknown__"

	PodConditionReady    = "ready"
	PodConditionNotReady = "not_ready"
)

// claimLatencyBuckets are the published buckets (100 ms … 240 s) preceded by
// 5, 10, 25 and 50 ms. A warm claim here takes milliseconds, so with the
// published buckets alone every observation would land in the first bucket
// and quantiles would be meaningless; adding lower buckets keeps queries
// written for the published buckets valid.
var claimLatencyBuckets = []float64{5, 10, 25, 50, 100, 250, 500, 750, 1000, 1250, 1500, 2000, 2500, 5000, 10000, 30000, 60000, 120000, 240000}

// creationLatencyBuckets are the published buckets of
// agent_sandbox_creation_latency_ms.
var creationLatencyBuckets = []float64{50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 240000, 300000, 600000}

var (
	// ClaimStartupLatency measures claim Ready minus the
	// webhook-first-observed-at annotation.
	ClaimStartupLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agent_sandbox_claim_startup_latency_ms",
		Help:    "Time from the claim being first observed by an admission webhook to the claim becoming Ready, in milliseconds.",
		Buckets: claimLatencyBuckets,
	}, []string{"launch_type", "sandbox_template"})

	// ClaimControllerStartupLatency measures claim Ready minus the time the
	// controller first observed the claim.
	ClaimControllerStartupLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agent_sandbox_claim_controller_startup_latency_ms",
		Help:    "Time from the claim controller first observing the claim to the claim becoming Ready, in milliseconds.",
		Buckets: claimLatencyBuckets,
	}, []string{"launch_type", "sandbox_template"})

	// ClientClaimStartupLatency measures claim Ready minus the
	// client-first-requested-at annotation set by the SDKs.
	ClientClaimStartupLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agent_sandbox_client_claim_startup_latency_ms",
		Help:    "Time from the client requesting the claim to the claim becoming Ready, in milliseconds.",
		Buckets: claimLatencyBuckets,
	}, []string{"launch_type", "sandbox_template"})

	// SandboxCreationLatency measures Sandbox Ready minus Sandbox creation,
	// recorded by the claim controller when the claim becomes Ready.
	SandboxCreationLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agent_sandbox_creation_latency_ms",
		Help:    "Time from Sandbox creation to its Ready condition, recorded when a claim becomes Ready, in milliseconds.",
		Buckets: creationLatencyBuckets,
	}, []string{"namespace", "launch_type", "sandbox_template"})

	// ClaimCreationTotal counts Sandboxes handed to claims, warm or cold.
	ClaimCreationTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agent_sandbox_claim_creation_total",
		Help: "Sandboxes bound to claims, by launch type (warm adoption or cold creation).",
	}, []string{"namespace", "sandbox_template", "launch_type", "warmpool_name", "pod_condition", "created_by"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(
		ClaimStartupLatency,
		ClaimControllerStartupLatency,
		ClientClaimStartupLatency,
		SandboxCreationLatency,
		ClaimCreationTotal,
	)
}

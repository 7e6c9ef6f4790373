package metrics

import (
	"context"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// sandboxesDesc is agent_sandboxes: Sandboxes counted per scrape from the
// informer cache, so the gauge can never drift from what exists.
var sandboxesDesc = prometheus.NewDesc("agent_sandboxes",
	"Number of Sandboxes by namespace, readiness, expiry, launch type, template, owner kind and creator.",
	[]string{"namespace", "ready_condition", "expired", "launch_type", "sandbox_template", "owned_by", "created_by"}, nil)

// scrapeTimeout bounds how long one scrape may wait for the cache.
const scrapeTimeout = 5 * time.Second

// SandboxCollector computes agent_sandboxes from a cache-backed reader.
type SandboxCollector struct {
	Reader client.Reader
}

// Describe implements prometheus.Collector.
func (c *SandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

// Collect implements prometheus.Collector.
func (c *SandboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var list sandboxv1beta1.SandboxList
	// Read-only: counting needs no copies. From the manager's cache a
	// plain List deep-copies every Sandbox on every scrape (O(n) copies;
	// 27% of controller CPU in the kwok gate benchmark at 1.8k Sandboxes,
	// docs/performance.md "Scale"), so take the cached objects as they are.
	if err := c.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, err)
		return
	}
	counts := map[[7]string]float64{}
	for i := range list.Items {
		counts[sandboxLabels(&list.Items[i])]++
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, v, k[:]...)
	}
}

// sandboxLabels derives the agent_sandboxes label values of one Sandbox.
func sandboxLabels(sb *sandboxv1beta1.Sandbox) [7]string {
	ready, expired := "false", "false"
	if c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady); c != nil {
		if c.Status == metav1.ConditionTrue {
			ready = "true"
		}
		if c.Reason == sandboxv1beta1.ReasonSandboxExpired {
			expired = "true"
		}
	}
	launch := labels.LaunchTypeCold
	if sb.Labels[labels.LaunchType] == labels.LaunchTypeWarm {
		launch = labels.LaunchTypeWarm
	}
	tmpl := sb.Annotations[labels.SandboxTemplateRef]
	if tmpl == "" {
		tmpl = "unknown"
	}
	owner := "None"
	if ref := metav1.GetControllerOf(sb); ref != nil {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == "extensions.agents.x-k8s.io" &&
			(ref.Kind == "SandboxClaim" || ref.Kind == "SandboxWarmPool") {
			owner = ref.Kind
		}
	}
	return [7]string{sb.Namespace, ready, expired, launch, tmpl, owner, labels.NormalizeCreatedBy(sb.Labels[labels.CreatedBy])}
}

// BuildInfo describes the running binary.
type BuildInfo struct {
	GitVersion, GitCommit, BuildDate string
}

// RegisterSandboxMetrics registers agent_sandboxes and
// agent_sandbox_build_info into controller-runtime's registry.
func RegisterSandboxMetrics(reader client.Reader, info BuildInfo) error {
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "agent_sandbox_build_info",
		Help: "Build information of the running agent-sandbox-controller; always 1.",
		ConstLabels: prometheus.Labels{
			"git_version": info.GitVersion, "git_commit": info.GitCommit, "build_date": info.BuildDate,
			"go_version": runtime.Version(), "compiler": runtime.Compiler, "platform": runtime.GOOS + "/" + runtime.GOARCH,
		},
	})
	buildInfo.Set(1)
	for _, c := range []prometheus.Collector{&SandboxCollector{Reader: reader}, buildInfo} {
		if err := ctrlmetrics.Registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

package claim

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/metrics"
)

func samples(t *testing.T, vec *prometheus.HistogramVec, lvs ...string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := vec.WithLabelValues(lvs...).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func counter(t *testing.T, lvs ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.ClaimCreationTotal.WithLabelValues(lvs...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// readySandbox is a warm Sandbox of template tmpl that became Ready 800 ms
// after it was created.
func readySandbox(tmpl string) *sandboxv1beta1.Sandbox {
	created := time.Unix(2000, 0)
	sb := sbWith(metav1.Condition{Type: "Ready", Status: "True", LastTransitionTime: metav1.NewTime(created.Add(800 * time.Millisecond))})
	sb.CreationTimestamp = metav1.NewTime(created)
	sb.Labels = map[string]string{labels.LaunchType: "warm"}
	sb.Annotations = map[string]string{labels.SandboxTemplateRef: tmpl}
	return sb
}

func newMetricsReconciler(now time.Time) *Reconciler {
	r := NewReconciler(nil, nil, nil, Options{})
	r.now = func() time.Time { return now }
	return r
}

func TestRecordReadyOnFirstTransitionOnly(t *testing.T) {
	now := time.Unix(3000, 0)
	r := newMetricsReconciler(now)
	claim := testClaim()
	key := types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}
	r.states.observe(key, claim.UID, now.Add(-40*time.Millisecond))
	claim.Annotations = map[string]string{
		labels.WebhookFirstObservedAt: now.Add(-60 * time.Millisecond).Format(time.RFC3339Nano),
		labels.ClientFirstRequestedAt: now.Add(-70 * time.Millisecond).Format(time.RFC3339Nano),
	}
	applyStatus(claim, readySandbox("t-first"), nil)
	sb := readySandbox("t-first")

	if err := r.recordReady(context.Background(), claim, sb, false); err != nil {
		t.Fatal(err)
	}
	for _, vec := range []*prometheus.HistogramVec{metrics.ClaimControllerStartupLatency, metrics.ClaimStartupLatency, metrics.ClientClaimStartupLatency} {
		if n := samples(t, vec, "warm", "t-first"); n != 1 {
			t.Errorf("%d samples, want 1", n)
		}
	}
	if n := samples(t, metrics.SandboxCreationLatency, "ns", "warm", "t-first"); n != 1 {
		t.Errorf("creation latency samples = %d", n)
	}
	// Ready flaps and comes back, or another pass sees it Ready: no second
	// observation.
	if err := r.recordReady(context.Background(), claim, sb, false); err != nil {
		t.Fatal(err)
	}
	if err := r.recordReady(context.Background(), claim, sb, true); err != nil {
		t.Fatal(err)
	}
	if n := samples(t, metrics.ClaimControllerStartupLatency, "warm", "t-first"); n != 1 {
		t.Errorf("re-recorded: %d samples", n)
	}
}

func TestRecordReadySkips(t *testing.T) {
	now := time.Unix(3000, 0)
	t.Run("not ready", func(t *testing.T) {
		r := newMetricsReconciler(now)
		claim := testClaim()
		applyStatus(claim, sbWith(metav1.Condition{Type: "Ready", Status: "False", Reason: "DependenciesNotReady"}), nil)
		sb := readySandbox("t-notready")
		_ = r.recordReady(context.Background(), claim, sb, false)
		if n := samples(t, metrics.ClaimControllerStartupLatency, "warm", "t-notready"); n != 0 {
			t.Fatalf("recorded a not-Ready claim")
		}
	})
	t.Run("was ready before the pass", func(t *testing.T) {
		r := newMetricsReconciler(now)
		claim := testClaim()
		sb := readySandbox("t-was")
		applyStatus(claim, sb, nil)
		_ = r.recordReady(context.Background(), claim, sb, true)
		if n := samples(t, metrics.ClaimControllerStartupLatency, "warm", "t-was"); n != 0 {
			t.Fatalf("recorded a claim that was Ready already")
		}
	})
	t.Run("missing or bad annotations skip only their histogram", func(t *testing.T) {
		r := newMetricsReconciler(now)
		claim := testClaim()
		r.states.observe(types.NamespacedName{Namespace: "ns", Name: "c"}, claim.UID, now.Add(-time.Second))
		claim.Annotations = map[string]string{
			labels.WebhookFirstObservedAt: now.Add(time.Hour).Format(time.RFC3339Nano), // clock skew: negative
			labels.ClientFirstRequestedAt: "yesterday",                                 // unparsable
		}
		sb := readySandbox("t-skip")
		applyStatus(claim, sb, nil)
		_ = r.recordReady(context.Background(), claim, sb, false)
		if samples(t, metrics.ClaimStartupLatency, "warm", "t-skip") != 0 || samples(t, metrics.ClientClaimStartupLatency, "warm", "t-skip") != 0 {
			t.Error("recorded from a negative or unparsable annotation")
		}
		if samples(t, metrics.ClaimControllerStartupLatency, "warm", "t-skip") != 1 {
			t.Error("controller latency not recorded")
		}
	})
	t.Run("no sandbox means launch type unknown", func(t *testing.T) {
		if launchType(nil) != "unknown" || templateOf(nil) != "__unknown__" {
			t.Fatal("nil sandbox labels")
		}
	})
}

func TestCreationCounter(t *testing.T) {
	claim := testClaim()
	claim.Labels = map[string]string{labels.CreatedBy: "go-client"}
	sb := readySandbox("t-count")
	countCreation(claim, sb, "warm")
	if v := counter(t, "ns", "t-count", "warm", "pool", "ready", "go-client"); v != 1 {
		t.Fatalf("warm counter = %v", v)
	}
	cold := sbWith()
	cold.Annotations = map[string]string{labels.SandboxTemplateRef: "t-count"}
	claim.Labels[labels.CreatedBy] = "kubectl"
	countCreation(claim, cold, "cold")
	if v := counter(t, "ns", "t-count", "cold", "pool", "not_ready", "unknown"); v != 1 {
		t.Fatalf("cold counter = %v", v)
	}
}

func TestClaimStatesKeyedByUID(t *testing.T) {
	s := newClaimStates()
	k := types.NamespacedName{Namespace: "ns", Name: "c"}
	t1 := time.Unix(1, 0)
	s.observe(k, "uid-1", t1)
	s.observe(k, "uid-1", time.Unix(2, 0)) // same UID: first time kept
	if st, _ := s.get(k, "uid-1"); !st.firstObserved.Equal(t1) {
		t.Fatal("same-UID update overwrote the first-observed time")
	}
	s.observe(k, "uid-2", time.Unix(3, 0)) // recreated claim
	if _, ok := s.get(k, "uid-1"); ok {
		t.Fatal("old UID state survived a recreate")
	}
	s.forget(k, "uid-1") // stale delete must not drop the new claim's state
	if _, ok := s.get(k, "uid-2"); !ok {
		t.Fatal("delete with another UID dropped the state")
	}
	s.forget(k, "uid-2")
	if _, ok := s.get(k, "uid-2"); ok {
		t.Fatal("state survived its delete")
	}
}

package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const controllerMetricsText = `# HELP agent_sandbox_claim_controller_startup_latency_ms x
# TYPE agent_sandbox_claim_controller_startup_latency_ms histogram
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="warm",sandbox_template="a",le="100"} 40
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="warm",sandbox_template="a",le="250"} 80
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="warm",sandbox_template="a",le="500"} 90
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="warm",sandbox_template="a",le="+Inf"} 100
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="cold",sandbox_template="a",le="100"} 0
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="cold",sandbox_template="a",le="250"} 0
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="cold",sandbox_template="a",le="500"} 0
agent_sandbox_claim_controller_startup_latency_ms_bucket{launch_type="cold",sandbox_template="a",le="+Inf"} 0
agent_sandbox_claim_controller_startup_latency_ms_count{launch_type="warm",sandbox_template="a"} 100
process_cpu_seconds_total 12.5
workqueue_depth{name="a"} 2
workqueue_depth{name="b"} 3
other_metric 7
`

func TestParseSamplesSumsLabelSets(t *testing.T) {
	s, err := parseSamples(strings.NewReader(controllerMetricsText), ControllerHistogram, "process_cpu_seconds_total", "workqueue_depth")
	if err != nil {
		t.Fatal(err)
	}
	if s.Values["process_cpu_seconds_total"] != 12.5 || s.Values["workqueue_depth"] != 5 {
		t.Errorf("values = %v", s.Values)
	}
	if _, ok := s.Values["other_metric"]; ok {
		t.Error("unrequested metric parsed")
	}
	h := Histogram(s.Buckets[ControllerHistogram])
	if h.Count() != 100 || h[250] != 80 {
		t.Errorf("buckets = %v", h)
	}
}

func TestHistogramQuantileInterpolatesAsPrometheus(t *testing.T) {
	h := Histogram{100: 40, 250: 80, 500: 90, math.Inf(1): 100}
	for _, tc := range []struct{ q, want float64 }{
		{0.2, 50},    // rank 20 of 40 in [0,100]
		{0.5, 137.5}, // rank 50: 10 of 40 into (100,250]
		{0.9, 500},   // exactly the 500 bucket's count
		{0.99, 500},  // in +Inf: the highest finite bound
	} {
		if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	before := Histogram{100: 40, 250: 40, 500: 40, math.Inf(1): 40}
	// After subtracting, 60 observations: rank 30 is the 30th of the 40 in
	// (100,250]: 100 + 150*30/40.
	if got := h.Sub(before).Quantile(0.5); math.Abs(got-212.5) > 1e-9 {
		t.Errorf("delta Quantile(0.5) = %v, want 212.5", got)
	}
	if !math.IsNaN(Histogram{}.Quantile(0.5)) {
		t.Error("empty histogram must give NaN")
	}
}

func TestPlotGrowthWritesPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "growth.png")
	rs := []*ScaleResult{
		{Sandboxes: 1000, ControllerRSS: 80 << 20, Client: Summary{P99: 200 * time.Millisecond}, CtrlP99: 150, CtrlObservations: 10},
		{Sandboxes: 5000, ControllerRSS: 160 << 20, Client: Summary{P99: 300 * time.Millisecond}, CtrlP99: 250, CtrlObservations: 10},
	}
	if err := PlotGrowth(rs, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Errorf("not a PNG (%d bytes)", len(b))
	}
	if err := PlotGrowth(nil, path); err == nil {
		t.Error("no results: want an error")
	}
}

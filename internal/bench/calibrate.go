package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Calibration is what the machine and the apiserver gave at the time of a
// run. A warm claim is a few apiserver writes in a row, so its latency
// moves with the apiserver's floor: on the 2-core development VM the same
// ConfigMap patch took 2.8 ms one hour and 7.5 ms the next, with the host
// taking up to 13 % of the VM's CPU. Runs compare only next to these.
type Calibration struct {
	// Writes ConfigMap merge patches, one after another, before the timed
	// window (not counted in the run's writes).
	Writes   int           `json:"writes"`
	WriteP50 time.Duration `json:"write_p50_ns"`
	WriteP90 time.Duration `json:"write_p90_ns"`
	// StealPercent is the share of this machine's CPU time the hypervisor
	// took during the timed window (/proc/stat), -1 when unknown. It
	// describes the node only when the harness runs on it (the local
	// cluster).
	StealPercent float64 `json:"steal_percent"`
}

const calibrationWrites = 20

// calibrateWrites times calibrationWrites merge patches of a ConfigMap of
// its own in namespace, then deletes it.
func calibrateWrites(ctx context.Context, c client.Client, namespace, runID string) (Calibration, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bench-calibration-" + runID,
		Labels: map[string]string{RunLabel: runID}}}
	if err := c.Create(ctx, cm); err != nil {
		return Calibration{}, fmt.Errorf("creating the calibration ConfigMap: %w", err)
	}
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), cm) }()
	ds := make([]time.Duration, 0, calibrationWrites)
	for i := range calibrationWrites {
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i))
		start := time.Now()
		if err := c.Patch(ctx, cm, patch); err != nil {
			return Calibration{}, fmt.Errorf("patching the calibration ConfigMap: %w", err)
		}
		ds = append(ds, time.Since(start))
		select {
		case <-time.After(20 * time.Millisecond): // one write at a time, as a claim's are
		case <-ctx.Done():
			return Calibration{}, ctx.Err()
		}
	}
	s := Summarize(ds)
	return Calibration{Writes: s.Count, WriteP50: s.P50, WriteP90: s.P90, StealPercent: -1}, nil
}

// cpuTimes is the aggregate "cpu" line of /proc/stat, in clock ticks.
type cpuTimes struct{ total, steal uint64 }

// readCPUTimes reads /proc/stat; ok is false where there is none.
func readCPUTimes() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	return parseCPUTimes(string(b))
}

// parseCPUTimes parses the aggregate line: user nice system idle iowait
// irq softirq steal [guest guest_nice]. Guest time is already part of user
// and nice, so it is not added again.
func parseCPUTimes(stat string) (cpuTimes, bool) {
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var t cpuTimes
		for i, s := range f[1:9] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cpuTimes{}, false
			}
			t.total += v
			if i == 7 {
				t.steal = v
			}
		}
		return t, true
	}
	return cpuTimes{}, false
}

// stealPercent is the steal share between two samples, -1 if unknown.
func stealPercent(before, after cpuTimes) float64 {
	if after.total <= before.total || after.steal < before.steal {
		return -1
	}
	return 100 * float64(after.steal-before.steal) / float64(after.total-before.total)
}

package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseCPUTimes(t *testing.T) {
	stat := "cpu  100 5 50 800 10 0 5 30 20 0\ncpu0 50 2 25 400 5 0 2 15 10 0\nintr 1 2 3\n"
	got, ok := parseCPUTimes(stat)
	// user..steal only: guest time is already inside user.
	if !ok || got.total != 100+5+50+800+10+0+5+30 || got.steal != 30 {
		t.Fatalf("parseCPUTimes = %+v, %v", got, ok)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 x 4 5 6 7 8\n", "cpu 1 2 3\n"} {
		if _, ok := parseCPUTimes(bad); ok {
			t.Errorf("parseCPUTimes(%q) accepted", bad)
		}
	}
}

func TestStealPercent(t *testing.T) {
	cases := []struct {
		before, after cpuTimes
		want          float64
	}{
		{cpuTimes{1000, 10}, cpuTimes{2000, 60}, 5},
		{cpuTimes{1000, 10}, cpuTimes{2000, 10}, 0},
		{cpuTimes{1000, 10}, cpuTimes{1000, 10}, -1}, // no time passed
		{cpuTimes{1000, 10}, cpuTimes{900, 10}, -1},  // counters went back (another boot)
	}
	for _, c := range cases {
		if got := stealPercent(c.before, c.after); got != c.want {
			t.Errorf("stealPercent(%+v, %+v) = %v, want %v", c.before, c.after, got, c.want)
		}
	}
}

func TestReportShowsCalibration(t *testing.T) {
	r := &Result{Scenario: Sustained, Calibration: &Calibration{Writes: 20, WriteP50: 2800 * time.Microsecond,
		WriteP90: 4 * time.Millisecond, StealPercent: 12.5}}
	var b bytes.Buffer
	if err := WriteTable(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ConfigMap patch p50 2.8ms, p90 4.0ms (20 one after another before the run)", "12.5% of this machine's CPU"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	r.Calibration.StealPercent = -1
	_ = WriteTable(&b, r)
	if strings.Contains(b.String(), "CPU steal") {
		t.Errorf("unknown steal reported:\n%s", b.String())
	}
	b.Reset()
	r.Calibration, r.CalibrationError = nil, "configmaps is forbidden"
	_ = WriteTable(&b, r)
	if !strings.Contains(b.String(), "unavailable: configmaps is forbidden") {
		t.Errorf("missing calibration not explained:\n%s", b.String())
	}
}

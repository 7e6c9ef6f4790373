package bench

import (
	"os"
	"strings"
	"testing"
)

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS(strings.NewReader("Name:\tx\nVmHWM:\t  9000 kB\nVmRSS:\t  1234 kB\nThreads:\t4\n"))
	if err != nil || got != 1234*1024 {
		t.Fatalf("parseVmRSS = %v, %v; want %d", got, err, 1234*1024)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := parseVmRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("parseVmRSS(%q): want an error", bad)
		}
	}
	// This process's own RSS is real and positive.
	if rss, err := ProcRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("ProcRSS(self) = %v, %v", rss, err)
	}
}

// The samplers share one loop: a reader that reports keeps its highest
// value, no PID (or no metrics URL) gives 0 once stopped.
func TestPeakSamplers(t *testing.T) {
	if got := newProcPeakSampler(os.Getpid).stop(); got <= 0 {
		t.Errorf("peak RSS of this process = %v, want > 0", got)
	}
	if got := newProcPeakSampler(func() int { return 0 }).stop(); got != 0 {
		t.Errorf("peak RSS without a PID = %v, want 0", got)
	}
	if got := newPeakSampler(t.Context(), "").stop(); got != 0 {
		t.Errorf("peak RSS without a metrics URL = %v, want 0", got)
	}
}

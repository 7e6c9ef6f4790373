package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// peakSampler returns the window's RSS sampler: from /proc when the
// controller's PID is known (free for the controller), else by scraping
// its /metrics.
func (cfg *ScaleConfig) peakSampler(ctx context.Context) *peakSampler {
	if cfg.ControllerPID == nil {
		return newPeakSampler(ctx, cfg.ControllerMetricsURL())
	}
	return newProcPeakSampler(cfg.ControllerPID)
}

// newProcPeakSampler samples the resident set of the process pid names
// (asked on every tick, so it follows a restart) every 200 ms.
func newProcPeakSampler(pid func() int) *peakSampler {
	return samplePeak(func() (float64, bool) {
		p := pid()
		if p <= 0 {
			return 0, false
		}
		rss, err := ProcRSS(p)
		return rss, err == nil
	})
}

// ProcRSS reads a process's resident set size in bytes (VmRSS of
// /proc/<pid>/status, the figure process_resident_memory_bytes reports).
func ProcRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading RSS of process %d: %w", pid, err)
	}
	defer func() { _ = f.Close() }()
	return parseVmRSS(f)
}

func parseVmRSS(r interface{ Read([]byte) (int, error) }) (float64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("parsing VmRSS %q: %w", f[0], err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading /proc status: %w", err)
	}
	return 0, fmt.Errorf("no VmRSS line")
}

package cpuclass

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Budget is a cgroup's real-time bandwidth: its real-time tasks together may
// run Runtime in every Period, per CPU, before they are throttled until the
// period ends. The kernel charges a task's time to its own group and to
// every parent, each against its own period, so a chain of groups should
// share one period. A long period lets short bursts (a garbage collection,
// a burst of watch events) run through; a short one throttles them.
type Budget struct {
	Period  time.Duration
	Runtime time.Duration
}

const (
	fileRuntime = "cpu.rt_runtime_us"
	filePeriod  = "cpu.rt_period_us"
)

// Supported reports whether the cpu hierarchy mounted at mount offers
// real-time group budgets. Without them (cgroup v2, or a kernel built
// without RT_GROUP_SCHED) nothing would bound a real-time task but the
// system-wide limit, so this package leaves such hosts alone.
func Supported(mount string) error {
	if _, err := os.Stat(filepath.Join(mount, fileRuntime)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s has no %s: the kernel has no real-time group budgets (cgroup v1 with RT_GROUP_SCHED)", mount, fileRuntime)
		}
		return err
	}
	return nil
}

// ReadBudget returns a cgroup's budget.
func ReadBudget(dir string) (Budget, error) {
	p, err := readMicros(filepath.Join(dir, filePeriod))
	if err != nil {
		return Budget{}, err
	}
	r, err := readMicros(filepath.Join(dir, fileRuntime))
	if err != nil {
		return Budget{}, err
	}
	return Budget{Period: p, Runtime: r}, nil
}

// share is the budget's fraction of a CPU, in parts per million.
func (b Budget) share() int64 {
	if b.Runtime < 0 {
		return math.MaxInt64 // -1: no limit
	}
	if b.Period <= 0 {
		return 0
	}
	return int64(b.Runtime) * 1_000_000 / int64(b.Period)
}

// SetBudget writes b to a cgroup. The kernel checks every write against
// the parent's share and the children's sum, so the period moves first
// when the current runtime allows it, else the runtime drops to zero first.
func SetBudget(dir string, b Budget) error {
	cur, err := ReadBudget(dir)
	if err != nil {
		return err
	}
	if cur == b {
		return nil
	}
	if cur.Period != b.Period {
		if err := writeMicros(filepath.Join(dir, filePeriod), b.Period); err != nil {
			// The current runtime over the new period would exceed the
			// parent's share: empty the budget, then change the period.
			if err := writeMicros(filepath.Join(dir, fileRuntime), 0); err != nil {
				return fmt.Errorf("set real-time budget of %s: %w", dir, err)
			}
			if err := writeMicros(filepath.Join(dir, filePeriod), b.Period); err != nil {
				return fmt.Errorf("set real-time period of %s: %w", dir, err)
			}
		}
	}
	if err := writeMicros(filepath.Join(dir, fileRuntime), b.Runtime); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			// The kernel keeps the children's sum within the parent's
			// budget: another group holds it (often a Pod still
			// terminating), or this one's children need more.
			return fmt.Errorf("set real-time budget of %s to %v per %v: the parent's budget is taken by other groups: %w", dir, b.Runtime, b.Period, err)
		}
		return fmt.Errorf("set real-time budget of %s to %v per %v: %w", dir, b.Runtime, b.Period, err)
	}
	return nil
}

// RaiseBudget gives a cgroup b's period and at least b's share: a shared
// parent keeps a larger share its other children need, rescaled to the new
// period, and one without a limit (-1) is left alone.
func RaiseBudget(dir string, b Budget) error {
	cur, err := ReadBudget(dir)
	if err != nil {
		return err
	}
	if cur.Runtime < 0 || (cur.Period == b.Period && cur.share() >= b.share()) {
		return nil
	}
	want := b
	if cur.share() > b.share() {
		want.Runtime = time.Duration(cur.share() * int64(b.Period) / 1_000_000).Truncate(time.Microsecond)
	}
	return SetBudget(dir, want)
}

// stale reports whether a cgroup holds a budget over another period than
// b's, which its parents cannot move to b's period while it holds it.
func stale(dir string, b Budget) (bool, error) {
	cur, err := ReadBudget(dir)
	if err != nil {
		return false, err
	}
	return cur.Runtime != 0 && cur.Period != b.Period, nil
}

func readMicros(path string) (time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return time.Duration(v) * time.Microsecond, nil
}

func writeMicros(path string, d time.Duration) error {
	return os.WriteFile(path, []byte(strconv.FormatInt(d.Microseconds(), 10)), 0o644)
}

package cpuclass

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// RaiseBudget never lowers what a shared parent already has (-1 is "no
// limit"), and SetBudget writes period and runtime in microseconds.
func TestRaiseBudgetKeepsALargerShare(t *testing.T) {
	write := func(dir string, period, runtime int) {
		t.Helper()
		for f, v := range map[string]int{filePeriod: period, fileRuntime: runtime} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := Budget{Period: 100 * time.Millisecond, Runtime: 30 * time.Millisecond}
	for _, tc := range []struct {
		period, runtime int
		want            Budget
	}{
		{1000000, 0, b},      // a new cgroup
		{1000000, 200000, b}, // 20% of a CPU is less than 30%
		{100000, 50000, Budget{Period: 100 * time.Millisecond, Runtime: 50 * time.Millisecond}},
		{1000000, -1, Budget{Period: time.Second, Runtime: -time.Microsecond}},
	} {
		dir := t.TempDir()
		write(dir, tc.period, tc.runtime)
		if err := RaiseBudget(dir, b); err != nil {
			t.Fatal(err)
		}
		got, err := ReadBudget(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("from %d/%d: budget %+v, want %+v", tc.runtime, tc.period, got, tc.want)
		}
	}
}

// On the real kernel: a child process enters the real-time class inside a
// cgroup with a budget, and leaves it again; without a budget the kernel
// refuses and the error says why.
func TestSetThreadsOnTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (make test-unit runs as root in CI)")
	}
	const mnt = "/sys/fs/cgroup/cpu"
	if err := Supported(mnt); err != nil {
		t.Skipf("no real-time group budgets on this host: %v", err)
	}
	dir, err := os.MkdirTemp(mnt, "cpuclass-test-")
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
		for range 50 {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	pid := child.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SetThreads(CgroupThreads(dir), Policy{Realtime: true}); err == nil {
		t.Fatal("the kernel let a thread enter the real-time class in a cgroup without a budget")
	}
	if err := SetBudget(dir, Budget{Period: 100 * time.Millisecond, Runtime: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	n, err := SetThreads(CgroupThreads(dir), Policy{Realtime: true})
	if err != nil || n != 1 {
		t.Fatalf("SetThreads = %d, %v; want 1 thread moved", n, err)
	}
	if rt, err := IsRealtime(pid); err != nil || !rt {
		t.Fatalf("IsRealtime = %v, %v", rt, err)
	}
	if n, err := SetThreads(ProcessThreads(pid), Policy{Realtime: true}); err != nil || n != 0 {
		t.Fatalf("second SetThreads = %d, %v; want nothing to do", n, err)
	}
	if n, err := SetThreads(ProcessThreads(pid), Policy{}); err != nil || n != 1 {
		t.Fatalf("back to normal: %d, %v", n, err)
	}
	if rt, _ := IsRealtime(pid); rt {
		t.Fatal("still real-time")
	}
}

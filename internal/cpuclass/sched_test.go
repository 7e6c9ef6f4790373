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
// limit"), moves every budget to the requested period (the kernel charges
// each level against its own), and SetBudget writes microseconds.
func TestRaiseBudgetKeepsALargerShare(t *testing.T) {
	write := func(dir string, period, runtime int) {
		t.Helper()
		for f, v := range map[string]int{filePeriod: period, fileRuntime: runtime} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b := Budget{Period: time.Second, Runtime: 300 * time.Millisecond}
	for _, tc := range []struct {
		period, runtime int
		want            Budget
	}{
		{1000000, 0, b},      // a new cgroup
		{1000000, 200000, b}, // 20% of a CPU is less than 30%
		{1000000, 500000, Budget{Period: time.Second, Runtime: 500 * time.Millisecond}},
		{100000, 30000, b}, // the same share over an older, shorter period
		{100000, 50000, Budget{Period: time.Second, Runtime: 500 * time.Millisecond}},
		{100000, 0, b},
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
	mnt := kernelCPUHierarchy(t)
	dir, err := os.MkdirTemp(mnt, "cpuclass-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(dir) })
	pid := startIn(t, dir)
	if _, err := SetThreads(CgroupThreads(dir), Policy{Realtime: true}); err == nil {
		t.Fatal("the kernel let a thread enter the real-time class in a cgroup without a budget")
	}
	if err := SetBudget(dir, Budget{Period: 100 * time.Millisecond, Runtime: time.Millisecond}); err != nil {
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

// On the real kernel: a Pod granted by an agent with another period (its
// whole chain holding budgets over 100 ms, its thread real-time) moves to
// the new period on every level and keeps the real-time class. Without the
// reset the kernel refuses to move the parents' period.
func TestGrantMovesAChainToANewPeriod(t *testing.T) {
	mnt := kernelCPUHierarchy(t)
	root, err := os.MkdirTemp(mnt, "cpuclass-test-")
	if err != nil {
		t.Fatal(err)
	}
	c := PodCgroups{Mount: mnt, Root: "/" + filepath.Base(root)}
	const uid, ctrID = "0c1d-test", "abc123"
	chain := []string{root, filepath.Join(root, "kubepods"), filepath.Join(root, "kubepods", "burstable")}
	chain = append(chain, filepath.Join(chain[2], "pod"+uid))
	chain = append(chain, filepath.Join(chain[3], ctrID))
	t.Cleanup(func() {
		for i := len(chain) - 1; i >= 0; i-- {
			removeCgroup(chain[i])
		}
	})
	mkdirs(t, chain[len(chain)-1])
	// Small budgets (1 % of a CPU): the running local cluster's groups hold
	// 90 % of the 95 % the kernel allows real-time tasks, and a group
	// another test just removed keeps its share until the kernel frees it.
	old := Budget{Period: 100 * time.Millisecond, Runtime: time.Millisecond}
	for _, dir := range chain {
		if err := SetBudget(dir, old); err != nil {
			t.Fatal(err)
		}
	}
	pid := startIn(t, chain[len(chain)-1])
	if _, err := SetThreads(CgroupThreads(chain[len(chain)-1]), Policy{Realtime: true}); err != nil {
		t.Fatal(err)
	}
	if err := SetBudget(chain[0], Budget{Period: time.Second, Runtime: 10 * time.Millisecond}); err == nil {
		t.Fatal("the kernel moved a parent's period under its children's budgets; the reset is not needed")
	}

	b := Budget{Period: time.Second, Runtime: 10 * time.Millisecond}
	if _, err := c.Grant(uid, []string{ctrID}, b); err != nil {
		t.Fatal(err)
	}
	for _, dir := range chain {
		if got, err := ReadBudget(dir); err != nil || got != b {
			t.Errorf("%s: budget %+v, %v; want %+v", dir, got, err, b)
		}
	}
	if rt, err := IsRealtime(pid); err != nil || !rt {
		t.Fatalf("after the move IsRealtime = %v, %v", rt, err)
	}
	// Granting again changes nothing.
	if n, err := c.Grant(uid, []string{ctrID}, b); err != nil || n != 0 {
		t.Fatalf("second Grant = %d, %v", n, err)
	}
}

// kernelCPUHierarchy returns the cgroup v1 cpu hierarchy, or skips the
// test where there is no such hierarchy with real-time budgets or no root.
func kernelCPUHierarchy(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (make test-unit runs as root in CI)")
	}
	const mnt = "/sys/fs/cgroup/cpu"
	if err := Supported(mnt); err != nil {
		t.Skipf("no real-time group budgets on this host: %v", err)
	}
	return mnt
}

// startIn starts a sleeping child process inside a cgroup and kills it
// when the test ends.
func startIn(t *testing.T, dir string) int {
	t.Helper()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	pid := child.Process.Pid
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return pid
}

// removeCgroup removes an empty cgroup, waiting for a killed task to leave.
func removeCgroup(dir string) {
	for range 50 {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

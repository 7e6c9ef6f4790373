package cpuclass

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Priority is the SCHED_RR priority given: low in the 1..99 range, so the
// kernel's own real-time threads (watchdogs, migration) stay above it.
const Priority = 10

// Policy is a thread's scheduling class.
type Policy struct {
	Realtime bool // SCHED_RR at Priority; false: SCHED_OTHER, nice unchanged
}

// maxPasses bounds SetThreads' loop. A thread created by a thread that was
// already moved inherits the class, so each pass can only find threads
// created by not-yet-moved ones; a Go program settles in two or three.
const maxPasses = 10

// SetThreads moves every thread list() returns to p, listing again until a
// pass finds nothing to change (a thread started during the pass by a thread
// still in the old class was missed). Threads that exit meanwhile are
// ignored. changed counts the threads moved.
func SetThreads(list func() ([]int, error), p Policy) (changed int, err error) {
	for range maxPasses {
		tids, err := list()
		if err != nil {
			return changed, err
		}
		n := 0
		for _, tid := range tids {
			moved, err := setThread(tid, p)
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			if err != nil {
				return changed, fmt.Errorf("thread %d: %w", tid, err)
			}
			if moved {
				n++
			}
		}
		changed += n
		if n == 0 {
			return changed, nil
		}
	}
	return changed, fmt.Errorf("threads kept appearing in the old class after %d passes", maxPasses)
}

// setThread applies p to one thread unless it already has it.
func setThread(tid int, p Policy) (bool, error) {
	cur, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, err
	}
	want := uint32(unix.SCHED_NORMAL)
	prio := uint32(0)
	if p.Realtime {
		want, prio = unix.SCHED_RR, Priority
	}
	if cur.Policy == want && cur.Priority == prio {
		return false, nil
	}
	if !p.Realtime && cur.Policy != unix.SCHED_RR && cur.Policy != unix.SCHED_FIFO {
		return false, nil // batch or idle threads were put there on purpose
	}
	attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: want, Priority: prio, Nice: cur.Nice}
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil {
		if errors.Is(err, unix.EPERM) && p.Realtime {
			return false, fmt.Errorf("%w (does its CPU cgroup and every parent have a real-time budget?)", err)
		}
		return false, err
	}
	return true, nil
}

// ProcessThreads lists the threads of pid (/proc/<pid>/task).
func ProcessThreads(pid int) func() ([]int, error) {
	return func() ([]int, error) {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return nil, fmt.Errorf("list threads of %d: %w", pid, err)
		}
		tids := make([]int, 0, len(ents))
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil {
				tids = append(tids, tid)
			}
		}
		return tids, nil
	}
}

// CgroupThreads lists the threads in a cgroup v1 directory (its tasks file:
// every thread, where cgroup.procs has only thread group leaders).
func CgroupThreads(dir string) func() ([]int, error) {
	return func() ([]int, error) {
		data, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if err != nil {
			return nil, fmt.Errorf("list threads of cgroup %s: %w", dir, err)
		}
		var tids []int
		for _, f := range strings.Fields(string(data)) {
			if tid, err := strconv.Atoi(f); err == nil {
				tids = append(tids, tid)
			}
		}
		return tids, nil
	}
}

// IsRealtime reports whether a thread runs in a real-time class.
func IsRealtime(tid int) (bool, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, err
	}
	return a.Policy == unix.SCHED_RR || a.Policy == unix.SCHED_FIFO, nil
}

package bench

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SchedStat is a process's scheduler accounting summed over its threads
// (/proc/<pid>/task/*/schedstat): time on a CPU, and time runnable but
// waiting for one. On a machine shared with other work the second says how
// much of a latency is CPU contention rather than the process's own work.
type SchedStat struct {
	Run, Wait time.Duration
}

// Sub returns s - before.
func (s SchedStat) Sub(before SchedStat) SchedStat {
	return SchedStat{Run: s.Run - before.Run, Wait: s.Wait - before.Wait}
}

// ProcSchedStat reads pid's SchedStat. Threads that exited inside a
// window are not counted (the Go runtime keeps its threads).
func ProcSchedStat(pid int) (SchedStat, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil {
		return SchedStat{}, fmt.Errorf("schedstat of process %d: %w", pid, err)
	}
	if len(files) == 0 {
		return SchedStat{}, fmt.Errorf("no schedstat for process %d", pid)
	}
	var s SchedStat
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		run, wait, err := parseSchedStat(b)
		if err != nil {
			return SchedStat{}, err
		}
		s.Run += run
		s.Wait += wait
	}
	return s, nil
}

// parseSchedStat parses "run_ns wait_ns timeslices".
func parseSchedStat(b []byte) (run, wait time.Duration, err error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("unexpected schedstat %q", b)
	}
	r, err1 := strconv.ParseInt(f[0], 10, 64)
	w, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("unexpected schedstat %q", b)
	}
	return time.Duration(r), time.Duration(w), nil
}

// findAPIServerPID returns the kube-apiserver process serving host (its
// --secure-port matches the URL's port): other apiservers may run on a
// shared machine, so the name alone does not do.
func findAPIServerPID(host string) int {
	u, err := url.Parse(host)
	if err != nil || u.Port() == "" {
		return 0
	}
	want := []byte("--secure-port=" + u.Port() + "\x00")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("kube-apiserver")) || !bytes.Contains(append(cmd, 0), want) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			return pid
		}
	}
	return 0
}

package localcluster

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Component states reported by Status.
const (
	StateRunning = "running"
	StateDead    = "dead"    // has a pid file, but the process is gone: `up` restarts it
	StateStopped = "stopped" // no pid file
)

// ComponentStatus is one component's process.
type ComponentStatus struct {
	Name   string
	State  string
	PID    int
	RSS    int64 // bytes
	Uptime time.Duration
}

// Status is a snapshot of the local cluster's processes.
type Status struct {
	Components []ComponentStatus
	// RuntimeProcesses counts shims, gVisor sandboxes and pod processes;
	// RuntimeRSS sums their RSS (shared pages are counted once per process).
	RuntimeProcesses int
	RuntimeRSS       int64
	Kubeconfig       string
	// GVisorPlatform is the platform the last Up chose for gVisor pods,
	// and why; nil if no Up recorded one.
	GVisorPlatform *PlatformChoice
}

// Running reports whether every component runs.
func (s Status) Running() bool {
	for _, c := range s.Components {
		if c.State != StateRunning {
			return false
		}
	}
	return len(s.Components) > 0
}

// Status inspects the components through their pid files. It needs no
// binaries and changes nothing.
func (c *Cluster) Status() (Status, error) {
	st := Status{Kubeconfig: c.cfg.KubeconfigPath()}
	up := systemUptime()
	for _, name := range Components {
		cs := ComponentStatus{Name: name, State: StateStopped}
		rec, err := c.cfg.readRecord(name)
		if err != nil {
			return st, err
		}
		if rec != nil {
			cs.PID = rec.PID
			cs.State = StateDead
			if rec.alive() {
				cs.State = StateRunning
				cs.RSS = rssBytes(rec.PID)
				if up > 0 {
					cs.Uptime = (up - time.Duration(rec.StartTime)*time.Second/clockTicks).Round(time.Second)
				}
			}
		}
		st.Components = append(st.Components, cs)
	}
	if pc, err := c.cfg.ReadPlatformChoice(); err == nil {
		st.GVisorPlatform = pc
	}
	for _, pid := range c.runtimeProcesses() {
		st.RuntimeProcesses++
		st.RuntimeRSS += rssBytes(pid)
	}
	return st, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat start times; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

func systemUptime() time.Duration {
	data, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return time.Duration(secs * float64(time.Second))
}

package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A component process is started in its own session (setsid) with its output
// appended to a log file, and recorded in a pid file. It is not tied to the
// process that started it: the CLI exits and the cluster keeps running. The
// record carries the kernel start time, so a recycled pid is never mistaken
// for the component, and a hash of everything that defines the process
// (binary, flags, config files), so Up can restart a component whose
// definition changed.

type procRecord struct {
	PID       int      `json:"pid"`
	StartTime uint64   `json:"startTime"` // /proc/<pid>/stat field 22, in clock ticks since boot
	Hash      string   `json:"hash"`
	Binary    string   `json:"binary"`
	Args      []string `json:"args"`
}

// procSpec defines how to run one component.
type procSpec struct {
	name        string
	binary      string
	args        []string
	env         []string
	configFiles []string // contents are part of the definition hash
	cpuGroup    string   // CPU cgroup the process (and its children) runs in; see cgroups.go
	realtime    bool     // SCHED_RR within its CPU group's real-time budget; see cpuagent.go
}

// hash identifies the spec: a change restarts the component on the next Up.
func (s procSpec) hash() string {
	h := sha256.New()
	fmt.Fprintln(h, s.binary)
	if st, err := os.Stat(s.binary); err == nil {
		fmt.Fprintln(h, st.Size(), st.ModTime().UnixNano())
	}
	for _, a := range s.args {
		fmt.Fprintln(h, a)
	}
	for _, e := range s.env {
		fmt.Fprintln(h, e)
	}
	for _, f := range s.configFiles {
		data, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%s %d\n", f, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c Config) pidFile(name string) string { return filepath.Join(c.pidDir(), name+".json") }
func (c Config) logFile(name string) string { return filepath.Join(c.logDir(), name+".log") }

// readRecord loads a component's pid file; a missing file is (nil, nil).
func (c Config) readRecord(name string) (*procRecord, error) {
	data, err := os.ReadFile(c.pidFile(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pid file: %w", err)
	}
	var r procRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("parse pid file %s: %w", c.pidFile(name), err)
	}
	return &r, nil
}

// alive reports whether the recorded process still runs (not a zombie, not a
// recycled pid).
func (r *procRecord) alive() bool {
	if r == nil || r.PID <= 0 {
		return false
	}
	st, err := readProcStat(r.PID)
	return err == nil && st.state != 'Z' && st.startTime == r.StartTime
}

type procStat struct {
	state     byte
	ppid      int
	startTime uint64
}

// readProcStat parses /proc/<pid>/stat. The command name may contain spaces
// and parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(f[1])
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return procStat{state: f[0][0], ppid: ppid, startTime: start}, nil
}

// rssBytes returns the resident set size of pid, from /proc/<pid>/status.
func rssBytes(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// running is a started process plus a channel closed when it exits, so
// health waits can fail fast instead of timing out.
type running struct {
	rec    *procRecord
	exited chan struct{}
	err    error // set before exited is closed
}

// startDetached launches spec in a new session, output appended to its log
// file, and records it in its pid file.
func (c Config) startDetached(spec procSpec) (*running, error) {
	for _, d := range []string{c.logDir(), c.pidDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	logPath := c.logFile(spec.name)
	rotateLog(logPath)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	fmt.Fprintf(logf, "---- %s starting %s %s\n", time.Now().Format(time.RFC3339), spec.binary, strings.Join(spec.args, " "))

	// A component must inherit nothing but its log: a descriptor this
	// process inherited without close-on-exec (e.g. the lock fd of
	// `flock LOCK go test ...`) would otherwise live as long as the
	// component and hold that lock for good.
	closeInheritedOnExec()
	cmd := exec.Command(spec.binary, spec.args...)
	cmd.Env = spec.env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: handed over directly, no copying goroutine
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	if spec.cpuGroup != "" {
		// Right after the start: what it spawns from here on (containerd's
		// shims) inherits the group. Precedence is a tuning, not a
		// requirement, so a host without a cpu controller still runs.
		if err := joinCPUGroup(spec.cpuGroup, cmd.Process.Pid); err != nil {
			fmt.Fprintf(logf, "---- not placed in cpu cgroup %s: %v\n", spec.cpuGroup, err)
		}
	}
	if spec.realtime {
		// Tuning too: a process that cannot enter the class runs in the
		// normal one.
		if err := setSchedClass(spec, cmd.Process.Pid); err != nil {
			fmt.Fprintf(logf, "---- %v\n", err)
		}
	}
	st, err := readProcStat(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("inspect %s: %w", spec.name, err)
	}
	rec := &procRecord{PID: cmd.Process.Pid, StartTime: st.startTime, Hash: spec.hash(), Binary: spec.binary, Args: spec.args}
	data, _ := json.MarshalIndent(rec, "", "  ")
	if err := writeFileIfChanged(c.pidFile(spec.name), data, 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	r := &running{rec: rec, exited: make(chan struct{})}
	// Reap the child if it exits while this process lives (tests run Up and
	// Down in one process); otherwise init adopts it when we exit.
	go func() {
		r.err = cmd.Wait()
		close(r.exited)
	}()
	return r, nil
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec.
// Go opens its own files that way; this catches the inherited ones.
func closeInheritedOnExec() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// followRecord watches a component process an earlier up started (this CLI
// is not its parent and cannot wait for it): exited closes once the recorded
// process is gone. A process found alive may be on its way out, for example
// an apiserver still draining after a SIGTERM, and must not be waited on as
// if it would ever answer. stop ends the polling.
func followRecord(rec *procRecord) (r *running, stop func()) {
	r = &running{rec: rec, exited: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if !rec.alive() {
					r.err = errEndedBeforeAnswering
					close(r.exited)
					return
				}
			}
		}
	}()
	var once sync.Once
	return r, func() { once.Do(func() { close(done) }) }
}

// waitReused waits for a process an earlier up started, with wait given the
// process to watch. ended reports that it ended before wait passed (it was
// stopping): the caller starts it again. Any other failure is err.
func waitReused(ctx context.Context, rec *procRecord, wait func(*running) error) (ended bool, err error) {
	r, stop := followRecord(rec)
	err = wait(r)
	stop()
	if err == nil || ctx.Err() != nil {
		return false, err
	}
	select {
	case <-r.exited:
		return true, nil
	default:
		return false, err // not healthy in time
	}
}

// errEndedBeforeAnswering: a process found running ended before its health
// check passed.
var errEndedBeforeAnswering = errors.New("ended before it answered (it was stopping when up found it)")

// rotateLog keeps the previous log as .1 once it grows past 20 MiB.
func rotateLog(path string) {
	if st, err := os.Stat(path); err == nil && st.Size() > 20<<20 {
		_ = os.Rename(path, path+".1")
	}
}

// stopProcess sends SIGTERM, waits up to grace, then SIGKILLs. It returns
// once the process is gone (or, if it cannot be killed, after a short wait).
func stopProcess(r *procRecord, grace time.Duration) {
	if !r.alive() {
		return
	}
	_ = syscall.Kill(r.PID, syscall.SIGTERM)
	if waitGone(r, grace) {
		return
	}
	_ = syscall.Kill(r.PID, syscall.SIGKILL)
	waitGone(r, 5*time.Second)
}

func waitGone(r *procRecord, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for r.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// logTail returns the last n lines of a component's log, for error messages.
func (c Config) logTail(name string, n int) string {
	f, err := os.Open(c.logFile(name))
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	const max = 64 << 10
	if st != nil && st.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

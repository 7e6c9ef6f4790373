package process

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

var (
	// errNoStdin reports a process whose stdin was already closed.
	errNoStdin = errors.New("process has no open stdin")
	// errNoPTY reports a resize of a process without a terminal.
	errNoPTY = errors.New("process has no pty")
	// errExited reports an operation that needs a running process.
	errExited = errors.New("process has exited")
)

// Process is one command started by Start. Its id is virtual: a counter
// value, never the OS PID, so clients cannot signal arbitrary processes.
type Process struct {
	id   int32
	cmd  *exec.Cmd
	pgid int
	tty  *os.File // PTY master, or nil

	writeMu sync.Mutex     // serializes writers so chunks do not interleave
	stdinMu sync.Mutex     // guards stdin
	stdin   io.WriteCloser // nil once closed

	mu       sync.Mutex
	exited   bool
	exitCode int32
}

func newProcess(cmd *exec.Cmd, stdin io.WriteCloser, tty *os.File) *Process {
	return &Process{cmd: cmd, pgid: cmd.Process.Pid, stdin: stdin, tty: tty}
}

// ID returns the virtual process id.
func (p *Process) ID() int32 { return p.id }

// Exited reports whether the process was reaped, and its exit code.
func (p *Process) Exited() (bool, int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited, p.exitCode
}

func (p *Process) setExited(code int32) {
	p.mu.Lock()
	p.exited, p.exitCode = true, code
	p.mu.Unlock()
}

// Signal sends sig to the process group, falling back to the process
// itself. Signalling a process that has exited is a no-op, so a reaped pid
// that the kernel hands to someone else is not signalled.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	if err := syscall.Kill(-p.pgid, sig); err == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// WriteStdin writes b to the process's stdin (the PTY for a terminal). A
// non-zero deadline bounds a write to a pipe that nobody drains.
func (p *Process) WriteStdin(b []byte, deadline time.Time) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	p.stdinMu.Lock()
	w := p.stdin
	p.stdinMu.Unlock()
	if w == nil {
		return errNoStdin
	}
	if f, ok := w.(*os.File); ok && p.tty == nil {
		_ = f.SetWriteDeadline(deadline)
	}
	// Written without stdinMu so that CloseStdin can interrupt a blocked
	// write by closing the pipe.
	_, err := w.Write(b)
	return err
}

// CloseStdin sends EOF: it closes the stdin pipe, or for a terminal the
// PTY master (the process then sees a hangup).
func (p *Process) CloseStdin() error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return errNoStdin
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

// Resize sets the terminal size.
func (p *Process) Resize(cols, rows uint32) error {
	if p.tty == nil {
		return errNoPTY
	}
	if done, _ := p.Exited(); done {
		return errExited
	}
	ws := &unix.Winsize{Col: uint16(min(cols, 0xffff)), Row: uint16(min(rows, 0xffff))}
	// Through SyscallConn, not Fd, which would make the master blocking.
	rc, err := p.tty.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) { ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return err
	}
	return ioctlErr
}

// Registry maps virtual ids to running processes. It is safe for
// concurrent use.
type Registry struct {
	next  atomic.Int32
	mu    sync.Mutex
	procs map[int32]*Process
}

// NewRegistry returns an empty registry; the first id is 1.
func NewRegistry() *Registry { return &Registry{procs: map[int32]*Process{}} }

// Register assigns p the next id and makes it reachable by Get.
func (r *Registry) Register(p *Process) int32 {
	p.id = r.next.Add(1)
	r.mu.Lock()
	r.procs[p.id] = p
	r.mu.Unlock()
	return p.id
}

// Get returns the process with the given id.
func (r *Registry) Get(id int32) (*Process, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.procs[id]
	return p, ok
}

// Remove forgets a process.
func (r *Registry) Remove(id int32) {
	r.mu.Lock()
	delete(r.procs, id)
	r.mu.Unlock()
}

// All returns a snapshot of the registered processes.
func (r *Registry) All() []*Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Process, 0, len(r.procs))
	for _, p := range r.procs {
		out = append(out, p)
	}
	return out
}

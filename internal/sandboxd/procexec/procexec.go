// Package procexec runs one command to completion for sandboxd: in its own
// session (and so its own process group), with a timeout, with per-stream
// output caps, and with the whole group killed on timeout or when the
// caller's context ends (client disconnect, daemon shutdown).
package procexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sigs.k8s.io/agent-sandbox/internal/capbuf"
	"syscall"
	"time"
)

// ErrTimeout reports that Spec.Timeout elapsed and the process group was
// killed.
var ErrTimeout = errors.New("command timed out")

// DefaultDrainGrace is used when Spec.DrainGrace is zero.
const DefaultDrainGrace = 2 * time.Second

// Spec describes one command.
type Spec struct {
	// Argv is the command and its arguments; no shell is involved.
	Argv []string
	// Dir is the working directory (an absolute host path).
	Dir string
	// Env is the full environment; nil inherits the daemon's.
	Env []string
	// Stdin feeds the command; nil gives it /dev/null.
	Stdin io.Reader
	// Timeout bounds the run; zero means only ctx bounds it.
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr in bytes; the rest is read
	// and discarded so the command never blocks on a full pipe. Zero or
	// negative means no cap.
	MaxOutput int
	// DrainGrace is how long output is still read after the command
	// exited (for background children that hold the pipes) or after it
	// was killed; zero means DefaultDrainGrace. It keeps a child that
	// escaped the process group from holding the result forever.
	DrainGrace time.Duration
}

// Result is the outcome of a run. It is filled as far as the run got, also
// when Run returns an error.
type Result struct {
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	// ExitCode is the exit status, or -1 when the process was killed by a
	// signal (see Signal).
	ExitCode int
	// Signal is the signal that killed the process, or 0.
	Signal syscall.Signal
}

// Run starts s and waits for it. Start failures are returned as is (they
// wrap exec.ErrNotFound, fs.ErrNotExist, fs.ErrPermission, ...); a timeout
// returns ErrTimeout, a cancelled ctx returns ctx.Err(), in both cases after
// the process group was killed and reaped.
func Run(ctx context.Context, s Spec) (Result, error) {
	if len(s.Argv) == 0 {
		return Result{}, errors.New("command is required")
	}
	runCtx := ctx
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeoutCause(ctx, s.Timeout, ErrTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(runCtx, s.Argv[0], s.Argv[1:]...)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	cmd.Stdin = s.Stdin
	// A new session makes the child the leader of a fresh process group,
	// so one kill(-pgid) reaches every descendant that did not move away.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error {
		KillGroup(cmd.Process.Pid, syscall.SIGKILL)
		return nil
	}
	// capbuf drains the pipes past the cap, so os/exec's copying
	// goroutines never block the command.
	stdout := capbuf.New(s.MaxOutput)
	stderr := capbuf.New(s.MaxOutput)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = s.DrainGrace
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = DefaultDrainGrace
	}
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	waitErr := cmd.Wait()

	res := Result{
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes(),
		StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated(),
	}
	if st := cmd.ProcessState; st != nil {
		res.ExitCode = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal()
		}
	}
	if runCtx.Err() != nil {
		// Descendants may have been forked between the kill and the
		// leader's exit; sweep the group once more.
		KillGroup(cmd.Process.Pid, syscall.SIGKILL)
		if err := ctx.Err(); err != nil {
			return res, err
		}
		return res, ErrTimeout
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("wait for %q: %w", s.Argv[0], waitErr)
	}
	return res, nil
}

// KillGroup sends sig to the process group pgid. A group that is already
// gone is not an error worth reporting.
func KillGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

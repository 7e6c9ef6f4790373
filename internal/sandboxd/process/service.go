// Package process implements the gRPC process.v1.ProcessService of
// sandboxd: Start (streamed output, optional PTY), Execute (buffered),
// WriteStdin, SendSignal and ResizeTTY. Every command runs in its own
// process group, which is killed when its Start stream or Execute call ends
// early, so no command outlives the client that asked for it.
package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/procexec"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

const (
	// DefaultChunkSize bounds one stdout/stderr event of Start.
	DefaultChunkSize = 4096
	// startDrain is how long Start keeps reading output after the process
	// was reaped, for grandchildren that still hold the pipes.
	startDrain = 5 * time.Second
	// executeDrain is the same for Execute.
	executeDrain = 10 * time.Second
	// shutdownGrace is how long processes get between SIGTERM and SIGKILL
	// when the daemon stops.
	shutdownGrace = 2 * time.Second
)

// Config configures the service.
type Config struct {
	// Root confines working directories and is the default one.
	Root *workspace.Root
	// ChunkSize bounds output events; zero means DefaultChunkSize.
	ChunkSize int
	// MaxOutput caps each buffered stream of Execute in bytes; the
	// response then sets stdout_truncated/stderr_truncated. Zero means no
	// cap (only the RPC deadline and message size limits bound it).
	MaxOutput int
	// Environ, when set, is the base environment of every process (the
	// daemon's plus late-bound env); nil means the daemon's own.
	Environ func() []string
	// Logger receives lifecycle records; nil discards.
	Logger *slog.Logger
}

// Service implements processv1.ProcessServiceServer.
type Service struct {
	processv1.UnimplementedProcessServiceServer
	cfg Config
	log *slog.Logger
	reg *Registry
}

// New returns a service with an empty registry.
func New(cfg Config) *Service {
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: log, reg: NewRegistry()}
}

// Registry exposes the running processes (for tests and shutdown).
func (s *Service) Registry() *Registry { return s.reg }

// command validates a ProcessConfig and builds the exec.Cmd for it.
func (s *Service) command(c *processv1.ProcessConfig) (*exec.Cmd, error) {
	argv := c.GetCommand()
	if len(argv) == 0 || argv[0] == "" {
		return nil, status.Error(codes.InvalidArgument, "command is required")
	}
	dir := s.cfg.Root.Dir()
	if c.Cwd != nil && c.GetCwd() != "" {
		rel, err := s.cfg.Root.Resolve(c.GetCwd())
		switch {
		case errors.Is(err, workspace.ErrEscape):
			return nil, status.Error(codes.PermissionDenied, err.Error())
		case err != nil:
			return nil, status.Errorf(codes.InvalidArgument, "cwd: %v", err)
		}
		dir = s.cfg.Root.Abs(rel)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	// Request variables come last so they override the daemon's; sorted
	// for a deterministic environment.
	env := os.Environ()
	if s.cfg.Environ != nil {
		env = s.cfg.Environ()
	}
	for _, k := range slices.Sorted(maps.Keys(c.GetEnvVars())) {
		env = append(env, k+"="+c.GetEnvVars()[k])
	}
	cmd.Env = env
	return cmd, nil
}

// startError maps an exec failure to a gRPC status.
func startError(err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return status.Errorf(codes.NotFound, "start process: %v", err)
	case errors.Is(err, fs.ErrPermission):
		return status.Errorf(codes.PermissionDenied, "start process: %v", err)
	default:
		return status.Errorf(codes.Internal, "start process: %v", err)
	}
}

// Execute runs a command to completion and returns its buffered output.
func (s *Service) Execute(ctx context.Context, req *processv1.ExecuteRequest) (*processv1.ExecuteResponse, error) {
	cmd, err := s.command(req.GetConfig())
	if err != nil {
		return nil, err
	}
	res, err := procexec.Run(ctx, procexec.Spec{
		Argv:       cmd.Args,
		Dir:        cmd.Dir,
		Env:        cmd.Env,
		MaxOutput:  s.cfg.MaxOutput,
		DrainGrace: executeDrain,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, startError(err)
	}
	return &processv1.ExecuteResponse{
		ExitCode:        int32(res.ExitCode),
		Stdout:          res.Stdout,
		Stderr:          res.Stderr,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
	}, nil
}

// Start runs a command and streams init, output chunks and exit.
func (s *Service) Start(req *processv1.StartRequest, stream processv1.ProcessService_StartServer) error {
	// Send the response headers before anything can fail. An error
	// returned first would otherwise go out as a gRPC "trailers-only"
	// response (one HEADERS frame that ends the stream), which an HTTP
	// reverse proxy on the way (the sandbox-router is one) may split into
	// headers and an empty end of stream when it flushes early: the client
	// then fails with "server closed the stream without sending trailers"
	// instead of the real error (a missing working directory, a missing
	// command), in a fraction of runs.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	cmd, err := s.command(req.GetConfig())
	if err != nil {
		return err
	}
	var (
		p       *Process
		outputs []*os.File // stdout, stderr (PTY: the master only)
	)
	if req.Pty != nil {
		p, outputs, err = startPTY(cmd, req.GetPty())
	} else {
		p, outputs, err = startPipes(cmd)
	}
	if err != nil {
		return startError(err)
	}
	id := s.reg.Register(p)
	defer s.reg.Remove(id)
	log := s.log.With("process_id", id, "argv0", cmd.Args[0], "pty", req.Pty != nil)
	log.Debug("process started")

	ctx := stream.Context()
	events := make(chan *processv1.StartResponse, 16)
	quit := make(chan struct{}) // closed when nobody reads events any more
	var readers sync.WaitGroup
	for i, f := range outputs {
		readers.Go(func() { s.pump(f, i == 1, events, quit) })
	}
	exited := make(chan int32, 1)
	go func() {
		exited <- waitExit(cmd)
	}()

	sendErr := stream.Send(&processv1.StartResponse{Event: &processv1.StartResponse_Init{Init: &processv1.InitEvent{ProcessId: id}}})
	if sendErr != nil {
		_ = p.Signal(syscall.SIGKILL) // best effort: the client is gone
	}
	var (
		code      int32
		isReaped  bool
		drained   = make(chan struct{})
		isDrained bool
		drainEnd  <-chan time.Time
		ctxDone   = ctx.Done()
	)
	go func() { readers.Wait(); close(drained) }()
loop:
	for {
		select {
		case ev := <-events:
			if sendErr == nil {
				if sendErr = stream.Send(ev); sendErr != nil {
					log.Info("stream send failed; killing process", "err", sendErr)
					_ = p.Signal(syscall.SIGKILL)
				}
			}
		case <-ctxDone:
			ctxDone = nil
			log.Info("client went away; killing process group")
			_ = p.Signal(syscall.SIGKILL)
		case code = <-exited:
			exited, isReaped = nil, true
			p.setExited(code)
			if isDrained {
				break loop
			}
			// Grandchildren may keep the pipes open; give them a
			// bounded time to finish writing.
			for _, f := range outputs {
				_ = f.SetReadDeadline(time.Now().Add(startDrain))
			}
			drainEnd = time.After(startDrain + 100*time.Millisecond)
		case <-drained:
			drained, isDrained = nil, true
			if isReaped {
				break loop
			}
		case <-drainEnd:
			// Backstop in case a read ignored its deadline: stop
			// waiting; the reader ends when the file is closed below.
			break loop
		}
	}
	// Whatever is still buffered was read before the end; send it.
	for {
		select {
		case ev := <-events:
			if sendErr == nil {
				sendErr = stream.Send(ev)
			}
			continue
		default:
		}
		break
	}
	close(quit)
	for _, f := range outputs {
		_ = f.Close()
	}
	_ = p.CloseStdin()
	log.Debug("process finished", "exit_code", code)
	if sendErr != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return sendErr
	}
	return stream.Send(&processv1.StartResponse{Event: &processv1.StartResponse_Exit{Exit: &processv1.ExitEvent{ExitCode: code}}})
}

// pump copies one output stream into events in chunks.
func (s *Service) pump(f *os.File, stderr bool, events chan<- *processv1.StartResponse, quit <-chan struct{}) {
	for {
		buf := make([]byte, s.cfg.ChunkSize)
		n, err := f.Read(buf)
		if n > 0 {
			ev := &processv1.StartResponse{Event: &processv1.StartResponse_Stdout{Stdout: buf[:n]}}
			if stderr {
				ev = &processv1.StartResponse{Event: &processv1.StartResponse_Stderr{Stderr: buf[:n]}}
			}
			select {
			case events <- ev:
			case <-quit:
				return
			}
		}
		if err != nil {
			// EOF, EIO from a PTY whose slave closed, a drain deadline,
			// or the file closed after the stream ended.
			return
		}
	}
}

// waitExit reaps cmd and returns its exit code, -1 for death by signal or
// a wait error.
func waitExit(cmd *exec.Cmd) int32 {
	err := cmd.Wait()
	if cmd.ProcessState == nil {
		return -1
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return -1
	}
	return int32(cmd.ProcessState.ExitCode())
}

// startPipes starts cmd in its own process group with separate stdin,
// stdout and stderr pipes. The read ends are pollable, so drain deadlines
// work on them.
func startPipes(cmd *exec.Cmd) (*Process, []*os.File, error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		files = append(files, inR, inW)
		closeAll()
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		files = append(files, inR, inW, outR, outW)
		closeAll()
		return nil, nil, err
	}
	files = append(files, inR, inW, outR, outW, errR, errW)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, nil, err
	}
	// The child has its copies; keeping ours would hide EOF.
	_ = inR.Close()
	_ = outW.Close()
	_ = errW.Close()
	return newProcess(cmd, inW, nil), []*os.File{outR, errR}, nil
}

// startPTY starts cmd as a session leader on a new pseudo-terminal. All
// output arrives on the master, which is also stdin.
func startPTY(cmd *exec.Cmd, size *processv1.PTY) (*Process, []*os.File, error) {
	var ws *pty.Winsize
	if size.GetCols() > 0 && size.GetRows() > 0 {
		ws = &pty.Winsize{Cols: uint16(min(size.GetCols(), 0xffff)), Rows: uint16(min(size.GetRows(), 0xffff))}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	master, err := pty.StartWithAttrs(cmd, ws, cmd.SysProcAttr)
	if err != nil {
		return nil, nil, err
	}
	f, err := pollable(master)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, err
	}
	return newProcess(cmd, f, f), []*os.File{f}, nil
}

// pollable returns a non-blocking, netpoller-backed copy of a PTY master.
// The pty package leaves the master in blocking mode (it calls Fd), on
// which read deadlines silently do nothing; the drain window after exit
// and closing the master on EOF both need a master that reads can be
// interrupted on. The copy must not be passed to anything that calls Fd.
func pollable(master *os.File) (*os.File, error) {
	defer func() { _ = master.Close() }()
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("set pty master non-blocking: %w", err)
	}
	return os.NewFile(uintptr(fd), master.Name()), nil
}

// WriteStdin feeds or closes a process's stdin.
func (s *Service) WriteStdin(ctx context.Context, req *processv1.WriteStdinRequest) (*processv1.WriteStdinResponse, error) {
	p, ok := s.reg.Get(req.GetProcessId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "process %d not found", req.GetProcessId())
	}
	var err error
	switch req.GetPayload().(type) {
	case *processv1.WriteStdinRequest_Eof:
		err = p.CloseStdin()
	case *processv1.WriteStdinRequest_Input:
		err = writeWithContext(ctx, p, req.GetInput())
	default:
		return nil, status.Error(codes.InvalidArgument, "one of input or eof is required")
	}
	switch {
	case err == nil:
		return &processv1.WriteStdinResponse{}, nil
	case errors.Is(err, errNoStdin):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EIO):
		return nil, status.Error(codes.FailedPrecondition, "process no longer reads stdin")
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	default:
		return nil, status.Errorf(codes.Internal, "write stdin: %v", err)
	}
}

// writeWithContext bounds a stdin write by the RPC deadline: a process that
// never reads would otherwise block the call once the pipe buffer is full.
// Without a deadline the write ends when the process exits (EPIPE) or its
// Start stream ends (the pipe is closed).
func writeWithContext(ctx context.Context, p *Process, b []byte) error {
	dl, _ := ctx.Deadline()
	return p.WriteStdin(b, dl)
}

var allowedSignals = map[processv1.Signal]syscall.Signal{
	processv1.Signal_SIGNAL_SIGINT:  syscall.SIGINT,
	processv1.Signal_SIGNAL_SIGTERM: syscall.SIGTERM,
	processv1.Signal_SIGNAL_SIGKILL: syscall.SIGKILL,
}

// SendSignal signals a process group.
func (s *Service) SendSignal(_ context.Context, req *processv1.SendSignalRequest) (*processv1.SendSignalResponse, error) {
	sig, ok := allowedSignals[req.GetSignal()]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unsupported signal %v", req.GetSignal())
	}
	p, ok := s.reg.Get(req.GetProcessId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "process %d not found", req.GetProcessId())
	}
	if err := p.Signal(sig); err != nil {
		return nil, status.Errorf(codes.Internal, "signal process %d: %v", req.GetProcessId(), err)
	}
	return &processv1.SendSignalResponse{}, nil
}

// ResizeTTY changes the terminal size of a PTY process.
func (s *Service) ResizeTTY(_ context.Context, req *processv1.ResizeTTYRequest) (*processv1.ResizeTTYResponse, error) {
	p, ok := s.reg.Get(req.GetProcessId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "process %d not found", req.GetProcessId())
	}
	if err := p.Resize(req.GetCols(), req.GetRows()); err != nil {
		if errors.Is(err, errNoPTY) || errors.Is(err, errExited) {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		return nil, status.Errorf(codes.Internal, "resize tty: %v", err)
	}
	return &processv1.ResizeTTYResponse{}, nil
}

// ShutdownProcesses asks every running process to stop with SIGTERM and
// kills the survivors after a short grace or when ctx ends.
func (s *Service) ShutdownProcesses(ctx context.Context) {
	procs := s.reg.All()
	if len(procs) == 0 {
		return
	}
	s.log.Info("stopping processes", "count", len(procs))
	for _, p := range procs {
		_ = p.Signal(syscall.SIGTERM)
	}
	grace := time.NewTimer(shutdownGrace)
	defer grace.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		alive := 0
		for _, p := range procs {
			if done, _ := p.Exited(); !done {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		select {
		case <-tick.C:
			continue
		case <-grace.C:
		case <-ctx.Done():
		}
		for _, p := range procs {
			_ = p.Signal(syscall.SIGKILL)
		}
		return
	}
}

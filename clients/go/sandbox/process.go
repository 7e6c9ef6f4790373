package sandbox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
)

// stdinChunk bounds one WriteStdin message.
const stdinChunk = 64 << 10

// RPCError is a failed call of sandboxd's gRPC process API.
type RPCError struct {
	// Operation is the SDK operation, e.g. "run".
	Operation string
	// Code is the gRPC status code.
	Code grpccodes.Code
	// Message is the sandbox's error message.
	Message string
	err     error
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("sandbox: %s: rpc error: code = %s desc = %s", e.Operation, e.Code, e.Message)
}

// Unwrap returns the gRPC error.
func (e *RPCError) Unwrap() error { return e.err }

// GRPCStatus lets status.FromError and status.Code see the status.
func (e *RPCError) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Is maps NotFound to ErrNotFound, DeadlineExceeded to ErrTimeout and
// Unavailable to ErrNotReady.
func (e *RPCError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == grpccodes.NotFound
	case ErrTimeout:
		return e.Code == grpccodes.DeadlineExceeded
	case ErrNotReady:
		return e.Code == grpccodes.Unavailable
	}
	return false
}

// rpcError wraps a gRPC error; a deadline of the call's own context reads
// as ErrTimeout.
func rpcError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctxError(ctx, op, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("sandbox: %s: %w", op, err)
	}
	return &RPCError{Operation: op, Code: st.Code(), Message: st.Message(), err: err}
}

// dialGRPC creates the (lazily connecting) client of the process API.
func dialGRPC(ep endpoint) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if ep.grpcTLS {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	cc, err := grpc.NewClient("passthrough:///"+ep.grpcTarget, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("sandbox: gRPC client for %s: %w", ep.grpcTarget, err)
	}
	return cc, nil
}

func (c *connection) processClient(op string) (processv1.ProcessServiceClient, error) {
	if c.grpc == nil {
		return nil, fmt.Errorf("sandbox: %s: no gRPC process endpoint on this connection: %w", op, ErrNotReady)
	}
	return processv1.NewProcessServiceClient(c.grpc), nil
}

// rpcIdentity returns the routing identity of the current sandbox.
func (s *Sandbox) rpcIdentity() identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return identity{sandboxName: s.sandboxName, namespace: s.opts.Namespace, podIP: s.state.podIP}
}

// rpcContext adds the request id, the trace context and, through the
// router, the routing headers as gRPC metadata (HTTP/2 headers).
func (c *connection) rpcContext(ctx context.Context, id identity, reqID string) context.Context {
	kv := []string{"x-request-id", reqID}
	if c.ep.grpcRouted {
		kv = append(kv,
			"x-sandbox-id", id.sandboxName,
			"x-sandbox-namespace", id.namespace,
			"x-sandbox-port", strconv.Itoa(c.ep.grpcPort))
		if a, err := netip.ParseAddr(id.podIP); err == nil {
			kv = append(kv, "x-sandbox-pod-ip", a.String())
		}
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for k, v := range carrier {
		kv = append(kv, k, v)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// Signal is a signal Process.Signal can send.
type Signal int32

// Signals sandboxd delivers (to the process group).
const (
	SignalInterrupt = Signal(processv1.Signal_SIGNAL_SIGINT)
	SignalTerminate = Signal(processv1.Signal_SIGNAL_SIGTERM)
	SignalKill      = Signal(processv1.Signal_SIGNAL_SIGKILL)
)

// TTYSize is a terminal size.
type TTYSize struct {
	Cols, Rows uint32
}

// ProcessOptions configure Start. The zero value runs the command in the
// workspace root with the daemon's environment and discards its output.
type ProcessOptions struct {
	// Env is added to (and overrides) the daemon's environment.
	Env map[string]string
	// Cwd is the working directory, relative to the workspace.
	Cwd string
	// TTY, when set, runs the process on a pseudo-terminal of that size;
	// all its output then arrives on Stdout.
	TTY *TTYSize
	// Stdout and Stderr receive the output as it arrives (nil discards).
	// A slow writer slows the process down rather than losing output.
	Stdout, Stderr io.Writer
}

// Process is a process started with Start. Its output is copied to the
// writers of ProcessOptions while it runs.
type Process struct {
	id      int32
	conn    *connection
	ident   identity
	timeout time.Duration // bound of each control RPC
	cancel  context.CancelFunc
	done    chan struct{}
	code    int
	err     error

	stdinMu     sync.Mutex
	stdinClosed bool
}

// Start starts argv (no shell) in the sandbox through sandboxd's gRPC
// process API and returns as soon as the process runs. Extension over the
// published SDK, which has no streaming API: it needs the process API
// (sandboxd's port 9090, which agent-sandbox's runtime image always
// serves) and works through the router (h2c), a pod tunnel or in-cluster,
// with either Runtime setting.
//
// The process lives as long as ctx and the connection: cancelling ctx,
// Kill, Close or Disconnect end the stream, and sandboxd then kills the
// process. RequestTimeout does not apply to the process's lifetime, only to
// the control calls (stdin, signals, resize); starting is bounded by
// PerAttemptTimeout.
func (s *Sandbox) Start(ctx context.Context, argv []string, opts *ProcessOptions) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: start: command must not be empty")
	}
	if opts == nil {
		opts = &ProcessOptions{}
	}
	conn, release, err := s.acquire("start")
	if err != nil {
		return nil, err
	}
	pc, err := conn.processClient("start")
	if err != nil {
		release()
		return nil, err
	}
	ctx, span := s.startOp(ctx, "start", attribute.String(attrCommandExecutable, argv[0]))
	pctx, cancel := context.WithCancel(ctx)
	id := s.rpcIdentity()
	req := &processv1.StartRequest{Config: &processv1.ProcessConfig{Command: argv, EnvVars: opts.Env}}
	if opts.Cwd != "" {
		req.Config.Cwd = &opts.Cwd
	}
	if opts.TTY != nil {
		req.Pty = &processv1.PTY{Cols: opts.TTY.Cols, Rows: opts.TTY.Rows}
	}
	fail := func(err error) (*Process, error) {
		cancel()
		release()
		recordErr(span, err)
		span.End()
		return nil, err
	}
	// Starting is bounded like a request; the stream itself is not.
	timer := time.AfterFunc(s.opts.PerAttemptTimeout, cancel)
	stream, err := pc.Start(conn.rpcContext(pctx, id, newRequestID()), req)
	if err != nil {
		timer.Stop()
		return fail(rpcError(pctx, "start", err))
	}
	first, err := stream.Recv()
	if !timer.Stop() {
		return fail(fmt.Errorf("sandbox: start: no answer within %s: %w", s.opts.PerAttemptTimeout, ErrTimeout))
	}
	if err != nil {
		return fail(rpcError(pctx, "start", err))
	}
	init := first.GetInit()
	if init == nil {
		return fail(fmt.Errorf("sandbox: start: first stream event is not the process start"))
	}
	// The start request is done: a running process must not hold up
	// Close or Disconnect, which end it by closing the connection.
	release()
	p := &Process{
		id: init.GetProcessId(), conn: conn, ident: id, timeout: s.opts.RequestTimeout,
		cancel: cancel, done: make(chan struct{}), code: -1,
	}
	go func() {
		defer span.End()
		p.pump(stream, opts.Stdout, opts.Stderr)
		recordErr(span, p.err)
		span.SetAttributes(attribute.Int(attrExitCode, p.code))
	}()
	return p, nil
}

// pump copies output events to the writers until the exit event.
func (p *Process) pump(stream grpc.ServerStreamingClient[processv1.StartResponse], stdout, stderr io.Writer) {
	defer func() {
		p.cancel()
		close(p.done)
	}()
	write := func(w io.Writer, b []byte) {
		if w != nil && len(b) > 0 {
			_, _ = w.Write(b)
		}
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				p.err = errors.New("sandbox: process stream ended without an exit status")
			} else {
				p.err = rpcError(context.Background(), "start", err)
			}
			return
		}
		switch e := ev.GetEvent().(type) {
		case *processv1.StartResponse_Stdout:
			write(stdout, e.Stdout)
		case *processv1.StartResponse_Stderr:
			write(stderr, e.Stderr)
		case *processv1.StartResponse_Exit:
			p.code = int(e.Exit.GetExitCode())
			return
		}
	}
}

// ID is sandboxd's id of the process (not an OS pid).
func (p *Process) ID() int32 { return p.id }

// Done is closed when the process has exited (or its stream failed).
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process and returns its exit code: -1 when it was
// killed by a signal. err is set when the stream failed instead.
func (p *Process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

// Kill ends the stream, which makes sandboxd kill the process.
func (p *Process) Kill() {
	p.cancel()
}

func (p *Process) control(op string, call func(ctx context.Context, pc processv1.ProcessServiceClient) error) error {
	select {
	case <-p.done:
		return fmt.Errorf("sandbox: %s: process %d has exited: %w", op, p.id, ErrNotFound)
	default:
	}
	pc, err := p.conn.processClient(op)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	if err := call(p.conn.rpcContext(ctx, p.ident, newRequestID()), pc); err != nil {
		return rpcError(ctx, op, err)
	}
	return nil
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig Signal) error {
	return p.control("signal", func(ctx context.Context, pc processv1.ProcessServiceClient) error {
		_, err := pc.SendSignal(ctx, &processv1.SendSignalRequest{ProcessId: p.id, Signal: processv1.Signal(sig)})
		return err
	})
}

// Resize changes the terminal size of a TTY process.
func (p *Process) Resize(size TTYSize) error {
	return p.control("resize", func(ctx context.Context, pc processv1.ProcessServiceClient) error {
		_, err := pc.ResizeTTY(ctx, &processv1.ResizeTTYRequest{ProcessId: p.id, Cols: size.Cols, Rows: size.Rows})
		return err
	})
}

// Stdin returns the process's standard input. Close it to send EOF.
func (p *Process) Stdin() io.WriteCloser { return processStdin{p} }

type processStdin struct{ p *Process }

// Write sends b in order, in chunks of at most 64 KiB.
func (w processStdin) Write(b []byte) (int, error) {
	p := w.p
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdinClosed {
		return 0, io.ErrClosedPipe
	}
	n := 0
	for n < len(b) {
		chunk := b[n:min(len(b), n+stdinChunk)]
		err := p.control("stdin", func(ctx context.Context, pc processv1.ProcessServiceClient) error {
			_, err := pc.WriteStdin(ctx, &processv1.WriteStdinRequest{ProcessId: p.id,
				Payload: &processv1.WriteStdinRequest_Input{Input: chunk}})
			return err
		})
		if err != nil {
			return n, err
		}
		n += len(chunk)
	}
	return n, nil
}

// Close sends EOF.
func (w processStdin) Close() error {
	p := w.p
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdinClosed {
		return nil
	}
	p.stdinClosed = true
	return p.control("stdin", func(ctx context.Context, pc processv1.ProcessServiceClient) error {
		_, err := pc.WriteStdin(ctx, &processv1.WriteStdinRequest{ProcessId: p.id,
			Payload: &processv1.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}})
		return err
	})
}

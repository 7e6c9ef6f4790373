package process

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/internal/sandboxdtest"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

type env struct {
	svc    *Service
	client processv1.ProcessServiceClient
	root   string
}

// newEnv serves the service on a real loopback listener.
func newEnv(t *testing.T) *env {
	t.Helper()
	ws, err := workspace.Open(filepath.Join(t.TempDir(), "workspace"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	svc := New(Config{Root: ws, ChunkSize: 64})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	processv1.RegisterProcessServiceServer(gs, svc)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &env{svc: svc, client: processv1.NewProcessServiceClient(conn), root: ws.Dir()}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func cfg(cmd ...string) *processv1.ProcessConfig { return &processv1.ProcessConfig{Command: cmd} }

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
}

func TestExecute(t *testing.T) {
	e := newEnv(t)
	res, err := e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: cfg("echo", "hello")})
	if err != nil || string(res.GetStdout()) != "hello\n" || res.GetExitCode() != 0 {
		t.Fatalf("echo: %v %v", res, err)
	}
	res, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: cfg("sh", "-c", "echo oops >&2; exit 3")})
	if err != nil || res.GetExitCode() != 3 || string(res.GetStderr()) != "oops\n" {
		t.Fatalf("exit 3: %v %v", res, err)
	}
	if err := os.MkdirAll(filepath.Join(e.root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := cfg("sh", "-c", `echo "$GREETING $HOME_OVERRIDE"; pwd`)
	c.EnvVars = map[string]string{"GREETING": "hi", "HOME_OVERRIDE": "yes"}
	c.Cwd = new("sub")
	res, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: c})
	if err != nil || string(res.GetStdout()) != "hi yes\n"+filepath.Join(e.root, "sub")+"\n" {
		t.Fatalf("env+cwd: %q %v", res.GetStdout(), err)
	}
	// Request env overrides the daemon's.
	t.Setenv("SANDBOXD_TEST_VAR", "daemon")
	c = cfg("sh", "-c", "echo $SANDBOXD_TEST_VAR")
	c.EnvVars = map[string]string{"SANDBOXD_TEST_VAR": "request"}
	if res, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: c}); err != nil || string(res.GetStdout()) != "request\n" {
		t.Fatalf("override: %q %v", res.GetStdout(), err)
	}
}

func TestExecuteErrors(t *testing.T) {
	e := newEnv(t)
	_, err := e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: cfg()})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{})
	wantCode(t, err, codes.InvalidArgument)
	c := cfg("pwd")
	c.Cwd = new("../..")
	_, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: c})
	wantCode(t, err, codes.PermissionDenied)
	_, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: cfg("no-such-binary-xyz")})
	wantCode(t, err, codes.NotFound)
	c = cfg("pwd")
	c.Cwd = new("missing-dir")
	_, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: c})
	wantCode(t, err, codes.NotFound)
	if err := os.WriteFile(filepath.Join(e.root, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: cfg(filepath.Join(e.root, "noexec"))})
	wantCode(t, err, codes.PermissionDenied)
	// The RPC deadline bounds Execute and kills the command.
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = e.client.Execute(short, &processv1.ExecuteRequest{Config: cfg("sleep", "300")})
	wantCode(t, err, codes.DeadlineExceeded)
}

func TestExecuteOutputCap(t *testing.T) {
	e := newEnv(t)
	e.svc.cfg.MaxOutput = 100
	res, err := e.client.Execute(ctx(t), &processv1.ExecuteRequest{Config: cfg("sh", "-c", "seq 1 1000")})
	if err != nil || len(res.GetStdout()) != 100 || !res.GetStdoutTruncated() || res.GetStderrTruncated() {
		t.Fatalf("cap: %d %v %v", len(res.GetStdout()), res.GetStdoutTruncated(), err)
	}
}

type startResult struct {
	pid            int32
	stdout, stderr bytes.Buffer
	exit           *int32
	order          []string
}

// collect reads a Start stream to its end.
func collect(t *testing.T, s processv1.ProcessService_StartClient, res *startResult) error {
	t.Helper()
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch x := ev.GetEvent().(type) {
		case *processv1.StartResponse_Init:
			res.pid = x.Init.GetProcessId()
			res.order = append(res.order, "init")
		case *processv1.StartResponse_Stdout:
			res.stdout.Write(x.Stdout)
			res.order = append(res.order, "stdout")
		case *processv1.StartResponse_Stderr:
			res.stderr.Write(x.Stderr)
			res.order = append(res.order, "stderr")
		case *processv1.StartResponse_Exit:
			code := x.Exit.GetExitCode()
			res.exit = &code
			res.order = append(res.order, "exit")
		}
	}
}

func TestStart(t *testing.T) {
	e := newEnv(t)
	s, err := e.client.Start(ctx(t), &processv1.StartRequest{Config: cfg("sh", "-c", "echo out; echo err >&2; head -c 1000 /dev/zero; exit 7")})
	if err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if res.pid <= 0 || res.exit == nil || *res.exit != 7 {
		t.Fatalf("pid %d exit %v", res.pid, res.exit)
	}
	if res.stdout.Len() != 4+1000 || !strings.HasPrefix(res.stdout.String(), "out\n") || res.stderr.String() != "err\n" {
		t.Fatalf("stdout %d bytes, stderr %q", res.stdout.Len(), res.stderr.String())
	}
	if res.order[0] != "init" || res.order[len(res.order)-1] != "exit" {
		t.Fatalf("event order %v", res.order)
	}
	// Chunks are bounded by the chunk size (64 in these tests).
	if n := strings.Count(strings.Join(res.order, " "), "stdout"); n < 1000/64 {
		t.Fatalf("only %d stdout events for 1004 bytes", n)
	}
	// The process is gone from the registry once the stream ended.
	_, err = e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: res.pid, Signal: processv1.Signal_SIGNAL_SIGTERM})
	wantCode(t, err, codes.NotFound)
}

// startAndInit starts a command and waits for its init event.
func startAndInit(t *testing.T, e *env, c context.Context, req *processv1.StartRequest) (processv1.ProcessService_StartClient, int32) {
	t.Helper()
	s, err := e.client.Start(c, req)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.GetInit() == nil {
		t.Fatalf("first event %v, %v", ev, err)
	}
	return s, ev.GetInit().GetProcessId()
}

func TestStartStdin(t *testing.T) {
	e := newEnv(t)
	s, pid := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("cat")})
	for _, chunk := range []string{"hello ", "world\n"} {
		if _, err := e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid, Payload: &processv1.WriteStdinRequest_Input{Input: []byte(chunk)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid, Payload: &processv1.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}}); err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if res.stdout.String() != "hello world\n" || res.exit == nil || *res.exit != 0 {
		t.Fatalf("cat: %q exit %v", res.stdout.String(), res.exit)
	}
}

func TestUnknownProcessAndBadSignal(t *testing.T) {
	e := newEnv(t)
	_, err := e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: 999, Payload: &processv1.WriteStdinRequest_Input{Input: []byte("x")}})
	wantCode(t, err, codes.NotFound)
	_, err = e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: 999, Signal: processv1.Signal_SIGNAL_SIGKILL})
	wantCode(t, err, codes.NotFound)
	_, err = e.client.ResizeTTY(ctx(t), &processv1.ResizeTTYRequest{ProcessId: 999, Cols: 1, Rows: 1})
	wantCode(t, err, codes.NotFound)
	s, pid := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("sleep", "300")})
	_, err = e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: pid, Signal: processv1.Signal_SIGNAL_UNSPECIFIED})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: pid, Signal: processv1.Signal(1)})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.ResizeTTY(ctx(t), &processv1.ResizeTTYRequest{ProcessId: pid, Cols: 80, Rows: 24})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid})
	wantCode(t, err, codes.InvalidArgument)
	if _, err := e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid, Payload: &processv1.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid, Payload: &processv1.WriteStdinRequest_Input{Input: []byte("x")}})
	wantCode(t, err, codes.FailedPrecondition)
	if _, err := e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: pid, Signal: processv1.Signal_SIGNAL_SIGKILL}); err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if res.exit == nil || *res.exit == 0 {
		t.Fatalf("exit after SIGKILL = %v", res.exit)
	}
}

func TestSignalsEndProcessGroup(t *testing.T) {
	// SIGTERM and SIGKILL reach the whole group, background children too.
	for _, sig := range []processv1.Signal{processv1.Signal_SIGNAL_SIGTERM, processv1.Signal_SIGNAL_SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newEnv(t)
			pidFile := filepath.Join(e.root, "child")
			s, pid := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("sh", "-c", "sleep 300 & echo $! > child; wait")})
			child := sandboxdtest.ReadPid(t, pidFile)
			if _, err := e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: pid, Signal: sig}); err != nil {
				t.Fatal(err)
			}
			var res startResult
			if err := collect(t, s, &res); err != nil {
				t.Fatal(err)
			}
			if res.exit == nil || *res.exit == 0 {
				t.Fatalf("exit = %v", res.exit)
			}
			sandboxdtest.WaitGone(t, child)
		})
	}
	// SIGINT is delivered too (a shell's background jobs ignore it by
	// POSIX rules, so the target here is a foreground command).
	t.Run("SIGNAL_SIGINT", func(t *testing.T) {
		e := newEnv(t)
		s, pid := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("sleep", "300")})
		if _, err := e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: pid, Signal: processv1.Signal_SIGNAL_SIGINT}); err != nil {
			t.Fatal(err)
		}
		var res startResult
		if err := collect(t, s, &res); err != nil {
			t.Fatal(err)
		}
		if res.exit == nil || *res.exit != -1 {
			t.Fatalf("exit = %v, want -1 (killed by a signal)", res.exit)
		}
	})
}

func TestClientCancelKillsProcess(t *testing.T) {
	e := newEnv(t)
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	pidFile := filepath.Join(e.root, "child")
	s, _ := startAndInit(t, e, c, &processv1.StartRequest{Config: cfg("sh", "-c", "sleep 300 & echo $! > child; wait")})
	child := sandboxdtest.ReadPid(t, pidFile)
	cancel()
	if _, err := s.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("recv after cancel: %v", err)
	}
	sandboxdtest.WaitGone(t, child)
	deadline := time.Now().Add(5 * time.Second)
	for len(e.svc.Registry().All()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("process still registered after the stream ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A background grandchild holding stdout open delays the exit event by at
// most the drain window.
func TestStartDrainBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s drain window")
	}
	e := newEnv(t)
	start := time.Now()
	s, err := e.client.Start(ctx(t), &processv1.StartRequest{Config: cfg("sh", "-c", "echo before; sleep 30 & exit 0")})
	if err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if res.stdout.String() != "before\n" || res.exit == nil || *res.exit != 0 {
		t.Fatalf("stdout %q exit %v", res.stdout.String(), res.exit)
	}
	if d := time.Since(start); d > startDrain+3*time.Second {
		t.Fatalf("exit took %v", d)
	}
}

// The same bound holds for a terminal that a background job keeps open.
func TestStartPTYDrainBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s drain window")
	}
	e := newEnv(t)
	start := time.Now()
	s, err := e.client.Start(ctx(t), &processv1.StartRequest{
		Config: cfg("sh", "-c", "echo before; trap '' HUP; nohup sleep 8 >/dev/null 2>&1 </dev/null & sleep 8 <&- & exit 0"),
		Pty:    &processv1.PTY{Cols: 80, Rows: 24},
	})
	if err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.stdout.String(), "before") || res.exit == nil || *res.exit != 0 {
		t.Fatalf("stdout %q exit %v", res.stdout.String(), res.exit)
	}
	if d := time.Since(start); d > startDrain+3*time.Second {
		t.Fatalf("exit took %v", d)
	}
}

func TestStartPTY(t *testing.T) {
	e := newEnv(t)
	s, err := e.client.Start(ctx(t), &processv1.StartRequest{
		Config: cfg("stty", "size"),
		Pty:    &processv1.PTY{Cols: 123, Rows: 45},
	})
	if err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(res.stdout.String()) != "45 123" || res.stderr.Len() != 0 || res.exit == nil || *res.exit != 0 {
		t.Fatalf("stty size: %q / %q exit %v", res.stdout.String(), res.stderr.String(), res.exit)
	}
}

func TestStartPTYResizeAndStdin(t *testing.T) {
	e := newEnv(t)
	// The shell prints the size whenever a line arrives on the terminal.
	s, pid := startAndInit(t, e, ctx(t), &processv1.StartRequest{
		Config: cfg("sh", "-c", "stty -echo; echo ready; while read line; do stty size; done"),
		Pty:    &processv1.PTY{Cols: 80, Rows: 24},
	})
	var out bytes.Buffer
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			ev, err := s.Recv()
			if err != nil {
				t.Fatalf("waiting for %q in %q: %v", want, out.String(), err)
			}
			out.Write(ev.GetStdout())
		}
	}
	readUntil("ready")
	send := func(text string) {
		t.Helper()
		if _, err := e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid, Payload: &processv1.WriteStdinRequest_Input{Input: []byte(text)}}); err != nil {
			t.Fatal(err)
		}
	}
	send("x\n")
	readUntil("24 80")
	if _, err := e.client.ResizeTTY(ctx(t), &processv1.ResizeTTYRequest{ProcessId: pid, Cols: 132, Rows: 50}); err != nil {
		t.Fatal(err)
	}
	send("y\n")
	readUntil("50 132")
	if _, err := e.client.SendSignal(ctx(t), &processv1.SendSignalRequest{ProcessId: pid, Signal: processv1.Signal_SIGNAL_SIGKILL}); err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if res.exit == nil || *res.exit == 0 {
		t.Fatalf("exit = %v", res.exit)
	}
}

// EOF on a terminal closes the master: the process sees a hangup and the
// stream ends.
func TestStartPTYEOF(t *testing.T) {
	e := newEnv(t)
	s, pid := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("cat"), Pty: &processv1.PTY{}})
	if _, err := e.client.WriteStdin(ctx(t), &processv1.WriteStdinRequest{ProcessId: pid, Payload: &processv1.WriteStdinRequest_Eof{Eof: &emptypb.Empty{}}}); err != nil {
		t.Fatal(err)
	}
	var res startResult
	if err := collect(t, s, &res); err != nil {
		t.Fatal(err)
	}
	if res.exit == nil {
		t.Fatal("no exit event")
	}
}

func TestShutdownProcesses(t *testing.T) {
	e := newEnv(t)
	s, _ := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("sleep", "300")})
	// One that ignores SIGTERM needs the SIGKILL after the grace.
	s2, _ := startAndInit(t, e, ctx(t), &processv1.StartRequest{Config: cfg("sh", "-c", "trap '' TERM; echo armed; sleep 300 & wait; wait")})
	if ev, err := s2.Recv(); err != nil || string(ev.GetStdout()) != "armed\n" {
		t.Fatalf("s2: %v %v", ev, err)
	}
	start := time.Now()
	e.svc.ShutdownProcesses(context.Background())
	if d := time.Since(start); d > shutdownGrace+2*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	for _, st := range []processv1.ProcessService_StartClient{s, s2} {
		var res startResult
		if err := collect(t, st, &res); err != nil {
			t.Fatal(err)
		}
		if res.exit == nil || *res.exit == 0 {
			t.Fatalf("exit = %v", res.exit)
		}
	}
}

func TestConcurrentStarts(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	pids := map[int32]bool{}
	for i := range 20 {
		wg.Go(func() {
			s, err := e.client.Start(ctx(t), &processv1.StartRequest{Config: cfg("sh", "-c", "echo $0", string(rune('a'+i)))})
			if err != nil {
				t.Error(err)
				return
			}
			var res startResult
			if err := collect(t, s, &res); err != nil {
				t.Error(err)
				return
			}
			if res.stdout.String() != string(rune('a'+i))+"\n" {
				t.Errorf("run %d: %q", i, res.stdout.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if pids[res.pid] {
				t.Errorf("pid %d reused", res.pid)
			}
			pids[res.pid] = true
		})
	}
	wg.Wait()
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	var wg sync.WaitGroup
	ids := make(chan int32, 200)
	for range 200 {
		wg.Go(func() { ids <- r.Register(&Process{}) })
	}
	wg.Wait()
	close(ids)
	seen := map[int32]bool{}
	for id := range ids {
		if id < 1 || id > 200 || seen[id] {
			t.Fatalf("bad or duplicate id %d", id)
		}
		seen[id] = true
	}
	if len(r.All()) != 200 {
		t.Fatalf("registered %d", len(r.All()))
	}
	p, ok := r.Get(17)
	if !ok || p.ID() != 17 {
		t.Fatalf("Get(17) = %v %v", p, ok)
	}
	r.Remove(17)
	if _, ok := r.Get(17); ok {
		t.Fatal("Get after Remove")
	}
	if next := r.Register(&Process{}); next != 201 {
		t.Fatalf("next id = %d, want monotonic 201", next)
	}
	// Exit code round trip, and signalling a completed process is a no-op
	// (the zero Process has no OS process behind it at all).
	p.setExited(42)
	if done, code := p.Exited(); !done || code != 42 {
		t.Fatalf("Exited = %v %d", done, code)
	}
	if err := p.Signal(9); err != nil {
		t.Fatalf("signal completed process: %v", err)
	}
	if err := p.Resize(80, 24); !errors.Is(err, errNoPTY) {
		t.Fatalf("resize without pty: %v", err)
	}
}

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
)

// fakeProcessService is a scripted process.v1 server that records calls.
type fakeProcessService struct {
	processv1.UnimplementedProcessServiceServer
	mu       sync.Mutex
	executed [][]string
	md       []metadata.MD
	stdin    bytes.Buffer
	eof      chan struct{}
	signals  []processv1.Signal
	execErr  error
}

func (f *fakeProcessService) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.md = append(f.md, md)
	f.mu.Unlock()
}

func (f *fakeProcessService) Execute(ctx context.Context, req *processv1.ExecuteRequest) (*processv1.ExecuteResponse, error) {
	f.record(ctx)
	f.mu.Lock()
	f.executed = append(f.executed, req.GetConfig().GetCommand())
	err := f.execErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &processv1.ExecuteResponse{ExitCode: 3, Stdout: []byte("out\n"), Stderr: []byte("err\n")}, nil
}

// Start echoes stdin to stdout until EOF or a signal, then exits with 0
// (EOF) or -1 (signal).
func (f *fakeProcessService) Start(req *processv1.StartRequest, stream grpc.ServerStreamingServer[processv1.StartResponse]) error {
	f.record(stream.Context())
	if err := stream.Send(&processv1.StartResponse{Event: &processv1.StartResponse_Init{Init: &processv1.InitEvent{ProcessId: 7}}}); err != nil {
		return err
	}
	_ = stream.Send(&processv1.StartResponse{Event: &processv1.StartResponse_Stderr{Stderr: []byte("started " + req.GetConfig().GetCwd())}})
	select {
	case <-f.eof:
		f.mu.Lock()
		data := bytes.Clone(f.stdin.Bytes())
		f.mu.Unlock()
		_ = stream.Send(&processv1.StartResponse{Event: &processv1.StartResponse_Stdout{Stdout: data}})
		return stream.Send(&processv1.StartResponse{Event: &processv1.StartResponse_Exit{Exit: &processv1.ExitEvent{ExitCode: 0}}})
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

func (f *fakeProcessService) WriteStdin(ctx context.Context, req *processv1.WriteStdinRequest) (*processv1.WriteStdinResponse, error) {
	if req.GetProcessId() != 7 {
		return nil, status.Error(codes.NotFound, "no such process")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetEof() != nil {
		close(f.eof)
	} else {
		f.stdin.Write(req.GetInput())
	}
	return &processv1.WriteStdinResponse{}, nil
}

func (f *fakeProcessService) SendSignal(ctx context.Context, req *processv1.SendSignalRequest) (*processv1.SendSignalResponse, error) {
	f.mu.Lock()
	f.signals = append(f.signals, req.GetSignal())
	f.mu.Unlock()
	return &processv1.SendSignalResponse{}, nil
}

// startGRPC serves svc on a loopback port and returns the port.
func startGRPC(t *testing.T, svc processv1.ProcessServiceServer) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	processv1.RegisterProcessServiceServer(gs, svc)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().(*net.TCPAddr).Port
}

// sandboxdInCluster connects to a REST server and a gRPC server on
// 127.0.0.1 as if 127.0.0.1 were the sandbox Pod's IP.
func sandboxdInCluster(t *testing.T, rest http.Handler, svc processv1.ProcessServiceServer) (*Sandbox, *recorder) {
	t.Helper()
	rec := &recorder{answer: func(_ int, w http.ResponseWriter, r *http.Request) { rest.ServeHTTP(w, r) }}
	srv := newServer(t, rec)
	o := Options{Runtime: RuntimeSandboxd, Connectivity: ConnectivityInCluster, SandboxdRESTPort: serverPort(t, srv)}
	o.SandboxdGRPCPort = 1 // unused unless svc is set
	if svc != nil {
		o.SandboxdGRPCPort = startGRPC(t, svc)
	}
	return connectedSandbox(t, o, sandboxState{podName: "p", podIP: "127.0.0.1"}), rec
}

func TestSandboxdFiles(t *testing.T) {
	mux := http.NewServeMux()
	files := map[string][]byte{}
	var mu sync.Mutex
	mux.HandleFunc("PUT /v1/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		files[r.PathValue("path")] = b
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		p := r.PathValue("path")
		if p == "dir" {
			writeJSON(w, 200, `{"path":"/dir","entries":[
				{"name":"a","size":3,"type":"file","modified_at":"2026-01-02T03:04:05Z","mode":"0644"},
				{"name":"sub","size":0,"type":"directory","modified_at":"2026-01-02T03:04:06.5Z","mode":"0755"},
				{"name":"odd","size":0,"type":"fifo","modified_at":"2026-01-02T03:04:06Z"}]}`)
			return
		}
		mu.Lock()
		b, ok := files[p]
		mu.Unlock()
		if !ok {
			writeJSON(w, 404, `{"code":"NOT_FOUND","message":"path does not exist within the sandbox"}`)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("DELETE /v1/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("path") == "full" && r.URL.Query().Get("recursive") != "true" {
			writeJSON(w, 409, `{"code":"CONFLICT","message":"directory is not empty; pass recursive=true to remove it"}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("HEAD /v1/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("path") {
		case "there":
			w.WriteHeader(200)
		case "forbidden":
			w.WriteHeader(403)
		default:
			w.WriteHeader(404)
		}
	})
	s, rec := sandboxdInCluster(t, mux, nil)
	ctx := testCtx(t)

	if err := s.Write(ctx, "dir/x.bin", []byte{0, 1, 2}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	r, body := rec.req(0)
	if r.Method != http.MethodPut || r.URL.EscapedPath() != "/v1/files/dir%2Fx.bin" ||
		r.Header.Get("Content-Type") != "application/octet-stream" || !bytes.Equal(body, []byte{0, 1, 2}) {
		t.Errorf("PUT = %s %s %q %v", r.Method, r.URL.EscapedPath(), r.Header.Get("Content-Type"), body)
	}
	for _, h := range []string{HeaderSandboxID, HeaderSandboxNamespace, HeaderSandboxPort, HeaderSandboxPodIP} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("routing header %s = %q sent straight to the pod", h, v)
		}
	}
	if err := s.Write(ctx, "../escape", []byte("x")); err == nil {
		t.Error("traversal accepted")
	}

	got, err := s.Read(ctx, "dir/x.bin")
	if err != nil || !bytes.Equal(got, []byte{0, 1, 2}) {
		t.Errorf("Read = %v, %v", got, err)
	}
	_, err = s.Read(ctx, "missing")
	var he *HTTPError
	if !errors.As(err, &he) || he.Code != "NOT_FOUND" || he.Body != "NOT_FOUND: path does not exist within the sandbox" || !errors.Is(err, ErrNotFound) {
		t.Errorf("Read(missing) = %v", err)
	}

	entries, err := s.List(ctx, "dir")
	if err != nil || len(entries) != 2 {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	if e := entries[1]; e.Name != "sub" || e.Type != FileTypeDirectory || e.Mode != "0755" ||
		!e.ModTime.Equal(time.Date(2026, 1, 2, 3, 4, 6, 5e8, time.UTC)) {
		t.Errorf("entry = %+v", e)
	}

	for path, want := range map[string]bool{"there": true, "absent": false} {
		if ok, err := s.Exists(ctx, path); err != nil || ok != want {
			t.Errorf("Exists(%s) = %v, %v", path, ok, err)
		}
	}
	if _, err := s.Exists(ctx, "forbidden"); !errors.As(err, &he) || he.StatusCode != 403 {
		t.Errorf("Exists(forbidden) = %v, want 403", err)
	}

	n := rec.count()
	if err := s.Delete(ctx, "full", true); err != nil {
		t.Errorf("Delete recursive: %v", err)
	}
	if r, _ := rec.req(n); r.Method != http.MethodDelete || r.URL.RawQuery != "recursive=true" {
		t.Errorf("DELETE = %s ?%s", r.Method, r.URL.RawQuery)
	}
	if err := s.Delete(ctx, "full", false); !errors.As(err, &he) || he.Code != "CONFLICT" {
		t.Errorf("Delete non-recursive = %v, want CONFLICT", err)
	}
	if r, _ := rec.req(n + 1); r.URL.RawQuery != "" {
		t.Errorf("non-recursive DELETE query %q", r.URL.RawQuery)
	}
}

func TestSandboxdRunOverGRPC(t *testing.T) {
	svc := &fakeProcessService{eof: make(chan struct{})}
	s, _ := sandboxdInCluster(t, http.NotFoundHandler(), svc)
	res, err := s.Run(testCtx(t), "echo out; echo err >&2; exit 3")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
		t.Errorf("result = %+v", res)
	}
	svc.mu.Lock()
	argv := svc.executed[0]
	md := svc.md[0]
	svc.mu.Unlock()
	if len(argv) != 3 || argv[0] != "/bin/sh" || argv[1] != "-c" || argv[2] != "echo out; echo err >&2; exit 3" {
		t.Errorf("argv = %q", argv)
	}
	if len(md.Get("x-sandbox-id")) != 0 {
		t.Errorf("routing metadata sent straight to the pod: %v", md)
	}
	if len(md.Get("x-request-id")) != 1 {
		t.Errorf("no x-request-id: %v", md)
	}

	svc.mu.Lock()
	svc.execErr = status.Error(codes.PermissionDenied, "cwd escapes the workspace")
	svc.mu.Unlock()
	_, err = s.Run(testCtx(t), "true")
	var re *RPCError
	if !errors.As(err, &re) || re.Code != codes.PermissionDenied || status.Code(err) != codes.PermissionDenied {
		t.Errorf("Run error = %v, want PermissionDenied surfaced", err)
	}
}

func TestSandboxdRunWithoutGRPCTarget(t *testing.T) {
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {})
	// A connection with no process endpoint (as a pod tunnel before it
	// is established) reports ErrNotReady.
	s := connectedSandbox(t, Options{Runtime: RuntimeSandboxd, APIURL: srv.URL}, sandboxState{podName: "p"})
	conn, release, err := s.acquire("t")
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.grpc.Close()
	conn.grpc = nil
	release()
	if _, err := s.Run(testCtx(t), "true"); !errors.Is(err, ErrNotReady) {
		t.Errorf("Run = %v, want ErrNotReady", err)
	}
}

func TestStartStreamsStdinAndSignals(t *testing.T) {
	svc := &fakeProcessService{eof: make(chan struct{})}
	s, _ := sandboxdInCluster(t, http.NotFoundHandler(), svc)
	var stdout, stderr syncBuffer
	p, err := s.Start(testCtx(t), []string{"cat"}, &ProcessOptions{Cwd: "work", Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if p.ID() != 7 {
		t.Errorf("ID = %d", p.ID())
	}
	if err := p.Signal(SignalInterrupt); err != nil {
		t.Errorf("Signal: %v", err)
	}
	big := bytes.Repeat([]byte("0123456789"), 10_000) // spans several stdin chunks
	if n, err := p.Stdin().Write(big); err != nil || n != len(big) {
		t.Fatalf("stdin write = %d, %v", n, err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatalf("stdin close: %v", err)
	}
	code, err := p.Wait()
	if err != nil || code != 0 {
		t.Fatalf("Wait = %d, %v", code, err)
	}
	if !bytes.Equal(stdout.Bytes(), big) || stderr.String() != "started work" {
		t.Errorf("stdout %d bytes, stderr %q", stdout.Len(), stderr.String())
	}
	svc.mu.Lock()
	sigs := svc.signals
	svc.mu.Unlock()
	if len(sigs) != 1 || sigs[0] != processv1.Signal_SIGNAL_SIGINT {
		t.Errorf("signals = %v", sigs)
	}
	if err := p.Signal(SignalKill); !errors.Is(err, ErrNotFound) {
		t.Errorf("Signal after exit = %v, want ErrNotFound", err)
	}
	if _, err := p.Stdin().Write([]byte("x")); err == nil {
		t.Error("stdin write after close accepted")
	}
}

func TestStartKillEndsStream(t *testing.T) {
	svc := &fakeProcessService{eof: make(chan struct{})}
	s, _ := sandboxdInCluster(t, http.NotFoundHandler(), svc)
	p, err := s.Start(testCtx(t), []string{"sleep", "100"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if _, err := p.Wait(); err == nil {
		t.Error("Wait after Kill reported a clean exit")
	}
}

// syncBuffer is a bytes.Buffer safe for the pump goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}
func (b *syncBuffer) String() string { return string(b.Bytes()) }
func (b *syncBuffer) Len() int       { return len(b.Bytes()) }

package sandboxd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/legacy"
)

func validConfig(root string) Config {
	return Config{
		ListenHost: "127.0.0.1", RESTPort: 8080, GRPCPort: 9090, LegacyPort: 8888,
		RootDir: root, ShutdownTimeout: 5 * time.Second, HTTPIdleTimeout: time.Minute,
		ExecTimeout: legacy.ExecTimeout{D: time.Minute, Text: "60.0"}, ExecDrainGrace: time.Second,
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"empty root":        func(c *Config) { c.RootDir = "" },
		"rest port 0":       func(c *Config) { c.RESTPort = 0 },
		"grpc port 70000":   func(c *Config) { c.GRPCPort = 70000 },
		"same ports":        func(c *Config) { c.GRPCPort = c.RESTPort },
		"legacy = rest":     func(c *Config) { c.LegacyPort = c.RESTPort },
		"negative legacy":   func(c *Config) { c.LegacyPort = -1 },
		"no shutdown grace": func(c *Config) { c.ShutdownTimeout = 0 },
	} {
		c := validConfig(t.TempDir())
		mod(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
	c := validConfig(t.TempDir())
	c.LegacyPort = 0
	if err := c.Validate(); err != nil {
		t.Errorf("legacy disabled: %v", err)
	}
}

type daemon struct {
	d                    *Daemon
	rest, legacy, grpcTo string
	client               processv1.ProcessServiceClient
	cancel               context.CancelFunc
	done                 chan error
}

func start(t testing.TB, cfg Config) *daemon {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ls := Listeners{REST: listen(), GRPC: listen(), Legacy: listen()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.ServeListeners(ctx, ls) }()
	conn, err := grpc.NewClient(ls.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	dm := &daemon{
		d: d, rest: "http://" + ls.REST.Addr().String(), legacy: "http://" + ls.Legacy.Addr().String(),
		grpcTo: ls.GRPC.Addr().String(), client: processv1.NewProcessServiceClient(conn), cancel: cancel, done: done,
	}
	t.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // shutdown; its result is not under test
	})
	return dm
}

func call(t *testing.T, method, url string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

// TestIntegration walks the REST and gRPC APIs against one daemon.
func TestIntegration(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	d := start(t, validConfig(root))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if code, body := call(t, "GET", d.rest+"/v1/health", nil); code != 200 || !strings.Contains(body, `"status":"ok"`) {
		t.Fatalf("health = %d %s", code, body)
	}
	if code, body := call(t, "PUT", d.rest+"/v1/files/notes/hello.txt", strings.NewReader("hi from PUT")); code != 204 {
		t.Fatalf("PUT = %d %s", code, body)
	}
	res, err := d.client.Execute(ctx, &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"cat", "notes/hello.txt"}}})
	if err != nil || string(res.GetStdout()) != "hi from PUT" {
		t.Fatalf("Execute cat = %v %v", res, err)
	}
	if _, err := d.client.Execute(ctx, &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"sh", "-c", "echo made > notes/by-exec.txt"}}}); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, "GET", d.rest+"/v1/files/notes/by-exec.txt", nil); code != 200 || body != "made\n" {
		t.Fatalf("GET = %d %q", code, body)
	}
	code, body := call(t, "GET", d.rest+"/v1/files/notes", nil)
	var listing struct {
		Entries []struct {
			Name string `json:"name"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(body), &listing); err != nil || code != 200 || len(listing.Entries) != 2 ||
		listing.Entries[0].Name != "by-exec.txt" || listing.Entries[1].Name != "hello.txt" {
		t.Fatalf("listing = %d %s", code, body)
	}
	if code, body := call(t, "DELETE", d.rest+"/v1/files/notes/hello.txt", nil); code != 204 {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if code, _ := call(t, "GET", d.rest+"/v1/files/notes/hello.txt", nil); code != 404 {
		t.Fatalf("GET after delete = %d", code)
	}
	// The legacy API shares the workspace when no base dir is set.
	if code, body := call(t, "POST", d.legacy+"/execute", strings.NewReader(`{"command":"cat notes/by-exec.txt"}`)); code != 200 ||
		body != `{"stdout":"made\n","stderr":"","exit_code":0}` {
		t.Fatalf("legacy execute = %d %s", code, body)
	}
	if code, body := call(t, "GET", d.legacy+"/exists/notes/by-exec.txt", nil); code != 200 || !strings.Contains(body, `"exists":true`) {
		t.Fatalf("legacy exists = %d %s", code, body)
	}
	d.d.SetReady(false)
	if code, body := call(t, "GET", d.rest+"/v1/health", nil); code != 503 || !strings.Contains(body, "UNAVAILABLE") {
		t.Fatalf("health after flip = %d %s", code, body)
	}
}

func TestLegacyBaseDir(t *testing.T) {
	tmp := t.TempDir()
	cfg := validConfig(filepath.Join(tmp, "workspace"))
	cfg.LegacyBaseDir = filepath.Join(tmp, "app")
	d := start(t, cfg)
	if code, body := call(t, "POST", d.legacy+"/execute", strings.NewReader(`{"command":"pwd"}`)); code != 200 ||
		!strings.Contains(body, `"stdout":"`+cfg.LegacyBaseDir+`\n"`) {
		t.Fatalf("pwd = %d %s", code, body)
	}
	if fi, err := os.Stat(cfg.LegacyBaseDir); err != nil || !fi.IsDir() {
		t.Fatalf("legacy base not created: %v", err)
	}
}

// TestShutdown: cancelling the serve context (what SIGTERM does in main)
// flips health, ends a running Start stream with a non-zero exit, waits
// for an in-flight legacy /execute, and returns.
func TestShutdown(t *testing.T) {
	d := start(t, validConfig(filepath.Join(t.TempDir(), "workspace")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := d.client.Start(ctx, &processv1.StartRequest{Config: &processv1.ProcessConfig{Command: []string{"sleep", "300"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.Recv(); err != nil || ev.GetInit() == nil {
		t.Fatalf("init: %v %v", ev, err)
	}
	execDone := make(chan string, 1)
	go func() {
		_, body := call(t, "POST", d.legacy+"/execute", strings.NewReader(`{"command":"sh -c 'sleep 0.5; echo finished'"}`))
		execDone <- body
	}()
	time.Sleep(100 * time.Millisecond)
	started := time.Now()
	d.cancel()
	var exit *processv1.ExitEvent
	for {
		ev, err := s.Recv()
		if err != nil {
			break
		}
		if ev.GetExit() != nil {
			exit = ev.GetExit()
		}
	}
	if exit == nil || exit.GetExitCode() == 0 {
		t.Fatalf("exit event = %v", exit)
	}
	if body := <-execDone; !strings.Contains(body, "finished") {
		t.Fatalf("in-flight execute = %s", body)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListeners did not return")
	}
	if took := time.Since(started); took > 5*time.Second {
		t.Fatalf("shutdown took %v", took)
	}
	d.done <- nil // for the cleanup
}

// A server that cannot serve (listener closed under it) makes
// ServeListeners shut down and report the error.
func TestServeErrorStopsDaemon(t *testing.T) {
	d, err := New(validConfig(filepath.Join(t.TempDir(), "workspace")))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l1, _ := net.Listen("tcp", "127.0.0.1:0")
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	_ = l1.Close()
	done := make(chan error, 1)
	go func() { done <- d.ServeListeners(context.Background(), Listeners{REST: l1, GRPC: l2}) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("no error from a closed listener")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListeners did not return")
	}
}

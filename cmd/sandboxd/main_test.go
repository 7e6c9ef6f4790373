package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"--version"}, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "sandboxd ") {
		t.Fatalf("--version: %q %v", out.String(), err)
	}
	for _, args := range [][]string{
		{"--rest-port=0"},
		{"--grpc-port=8080", "--rest-port=8080"},
		{"--root-dir="},
		{"--log-format=xml"},
		{"--log-level=loud"},
		{"--stream-chunk-size=-1"},
		{"--no-such-flag"},
		{"extra-arg"},
	} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestBinary builds the static binary, runs it, uses both HTTP APIs, and
// stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "sandboxd")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("binary is dynamically linked")
		}
	}
	_ = f.Close()

	tmp := t.TempDir()
	rest, grpcPort, legacyPort := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(bin, "--listen-host=127.0.0.1",
		fmt.Sprintf("--rest-port=%d", rest), fmt.Sprintf("--grpc-port=%d", grpcPort), fmt.Sprintf("--legacy-port=%d", legacyPort),
		"--root-dir="+filepath.Join(tmp, "workspace"))
	cmd.Env = append(os.Environ(), "SANDBOX_BASE_DIR="+filepath.Join(tmp, "app"), "SANDBOX_EXEC_TIMEOUT_SECONDS=bogus", "SANDBOX_ID=abc")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := make(chan []string, 1)
	go func() {
		var lines []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		logs <- lines
	}()
	defer func() { _ = cmd.Process.Kill() }()

	base := fmt.Sprintf("http://127.0.0.1:%d", rest)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := http.Get(base + "/v1/health")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not healthy: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, err := http.Get(base + "/v1/metadata")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), `"SANDBOX_ID":"abc"`) {
		t.Fatalf("metadata = %s", b)
	}
	// SANDBOX_BASE_DIR sets the legacy workspace and command directory.
	r, err = http.Post(fmt.Sprintf("http://127.0.0.1:%d/execute", legacyPort), "application/json", strings.NewReader(`{"command":"pwd"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if want := `{"stdout":"` + filepath.Join(tmp, "app") + `\n","stderr":"","exit_code":0}`; string(b) != want {
		t.Fatalf("legacy pwd = %s, want %s", b, want)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("daemon did not stop on SIGTERM")
	}
	lines := <-logs
	var sawWarn, sawStopped bool
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		sawWarn = sawWarn || strings.Contains(fmt.Sprint(rec["msg"]), "SANDBOX_EXEC_TIMEOUT_SECONDS")
		sawStopped = sawStopped || rec["msg"] == "stopped"
	}
	if !sawWarn || !sawStopped {
		t.Fatalf("logs missing the timeout warning or the stop record:\n%s", strings.Join(lines, "\n"))
	}
}

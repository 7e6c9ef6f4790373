package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
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
		err := run(args, io.Discard, io.Discard)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 2 || !strings.Contains(msg.String(), "sandboxd --help") {
			t.Errorf("run(%q): exit %d, message %q, want 2 and a pointer to --help", args, code, msg.String())
		}
	}
	if code := exitCode(errors.New("listen on :8080: address in use"), io.Discard); code != 1 {
		t.Errorf("runtime failure exits %d, want 1", code)
	}
}

func TestRunHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-help", "-h"} {
		var out, errOut bytes.Buffer
		err := run([]string{arg}, &out, &errOut)
		if code := exitCode(err, &errOut); code != 0 {
			t.Errorf("%s: exit %d (%v)", arg, code, err)
		}
		if !strings.HasPrefix(out.String(), "Usage: sandboxd") || !strings.Contains(out.String(), "-legacy-port") || errOut.Len() != 0 {
			t.Errorf("%s: stdout %q, stderr %q", arg, out.String(), errOut.String())
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary builds the static binary once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandboxd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sandboxd")
		build := exec.Command("go", "build", "-trimpath", "-o", binPath, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// TestBinaryExitCodes runs the real binary: --help prints usage on stdout
// and exits 0; a bad flag exits 2 with a message on stderr.
func TestBinaryExitCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"--help"}, 0, "Usage: sandboxd", ""},
		{[]string{"--no-such-flag"}, 2, "", "flag provided but not defined: -no-such-flag"},
		{[]string{"--rest-port=http"}, 2, "", `invalid value "http" for flag -rest-port`},
		{[]string{"--log-format=xml"}, 2, "", "--log-format must be json or text"},
	} {
		cmd := exec.Command(bin, tc.args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errOut.String(), tc.stderr) ||
			(tc.stdout == "" && out.Len() != 0) {
			t.Errorf("sandboxd %q: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errOut.String())
		}
	}
}

// TestBinary builds the static binary, runs it, uses both HTTP APIs, and
// stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
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
	rest, grpcPort, legacyPort := freeport.T(t), freeport.T(t), freeport.T(t)
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

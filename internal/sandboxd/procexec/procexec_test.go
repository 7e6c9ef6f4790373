package procexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/internal/sandboxdtest"
)

func TestRunOutputAndExitCode(t *testing.T) {
	res, err := Run(context.Background(), Spec{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Fatalf("got %+v", res)
	}
}

func TestRunDirEnvStdin(t *testing.T) {
	dir := t.TempDir()
	res, err := Run(context.Background(), Spec{
		Argv:  []string{"sh", "-c", "pwd; echo $FOO; cat"},
		Dir:   dir,
		Env:   []string{"FOO=bar", "PATH=" + os.Getenv("PATH")},
		Stdin: strings.NewReader("from stdin"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := dir + "\nbar\nfrom stdin"; string(res.Stdout) != want {
		t.Fatalf("stdout = %q, want %q", res.Stdout, want)
	}
}

func TestRunStartErrors(t *testing.T) {
	if _, err := Run(context.Background(), Spec{Argv: []string{"no-such-binary-xyz"}}); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("missing binary: %v", err)
	}
	if _, err := Run(context.Background(), Spec{}); err == nil {
		t.Error("empty argv accepted")
	}
}

func TestRunOwnSession(t *testing.T) {
	res, err := Run(context.Background(), Spec{Argv: []string{"sh", "-c", "ps -o sid= -p $$; echo $$"}})
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) != 2 || f[0] != f[1] {
		t.Fatalf("session id and pid differ: %q", res.Stdout)
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	res, err := Run(context.Background(), Spec{
		Argv:    []string{"sh", "-c", "sleep 300 & echo $! > " + pidFile + "; echo started; wait"},
		Timeout: 300 * time.Millisecond,
	})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
	if string(res.Stdout) != "started\n" || res.Signal != syscall.SIGKILL || res.ExitCode != -1 {
		t.Fatalf("res = %+v", res)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	sandboxdtest.WaitGone(t, pid)
}

func TestRunCancelKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if _, err := os.Stat(pidFile); err == nil {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := Run(ctx, Spec{Argv: []string{"sh", "-c", "sleep 300 & echo $! > " + pidFile + "; wait"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	sandboxdtest.WaitGone(t, pid)
}

func TestRunOutputCap(t *testing.T) {
	res, err := Run(context.Background(), Spec{
		Argv:      []string{"sh", "-c", "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2"},
		MaxOutput: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || !res.StdoutTruncated || len(res.Stderr) != 10 || res.StderrTruncated || res.ExitCode != 0 {
		t.Fatalf("stdout %d truncated %v stderr %d truncated %v exit %d",
			len(res.Stdout), res.StdoutTruncated, len(res.Stderr), res.StderrTruncated, res.ExitCode)
	}
}

// A background child that keeps the output pipe open does not hold the
// result back beyond DrainGrace.
func TestRunDrainGrace(t *testing.T) {
	start := time.Now()
	res, err := Run(context.Background(), Spec{
		Argv:       []string{"sh", "-c", "echo hi; sleep 30 &"},
		DrainGrace: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second || string(res.Stdout) != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("res %+v after %v", res, time.Since(start))
	}
}

func TestRunSignalled(t *testing.T) {
	res, err := Run(context.Background(), Spec{Argv: []string{"sh", "-c", "kill -TERM $$"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != -1 || res.Signal != syscall.SIGTERM {
		t.Fatalf("res = %+v", res)
	}
}

func TestRunConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			res, err := Run(context.Background(), Spec{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d; exit %d", i, i%5)}})
			if err != nil {
				errs <- err
				return
			}
			if string(res.Stdout) != fmt.Sprintf("%d\n", i) || res.ExitCode != i%5 {
				errs <- fmt.Errorf("run %d: %+v", i, res)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A child that leaves the process group (setsid) and keeps the pipes open
// cannot hold a timed-out run beyond the drain grace.
func TestRunTimeoutWithEscapedChild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start := time.Now()
	_, err := Run(context.Background(), Spec{
		Argv:       []string{"sh", "-c", "setsid sh -c 'echo $$ > " + pidFile + "; exec sleep 30' & sleep 300"},
		Timeout:    200 * time.Millisecond,
		DrainGrace: 300 * time.Millisecond,
	})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
}

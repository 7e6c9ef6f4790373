package cli_test

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestExecTTY runs `exec -it` on a real pseudo-terminal: the remote shell
// has a terminal of our size, follows our resizes, gets Ctrl-C as a
// keystroke (interrupting its foreground job, not the CLI), and its exit
// code is the CLI's.
func TestExecTTY(t *testing.T) { runExecTTY(t, devstackTarget(t)) }

// TestExecTTYCluster is TestExecTTY on a real cluster, when
// AGENT_SANDBOX_CLI_E2E_KUBECONFIG is set.
func TestExecTTYCluster(t *testing.T) { runExecTTY(t, clusterTarget(t)) }

func runExecTTY(t *testing.T, st *target) {
	t.Helper()
	name := "tty-a" + st.suffix
	ok(t, st, "create", "--pool", st.pool, "--name", name, "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", name) })

	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "exec", "-it", name, "--", "/bin/sh")
	cmd.Env = append(cliEnv(st), "PS1=$ ")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ptmx.Close() }()
	out := &testenv.SyncBuffer{}
	go func() { _, _ = io.Copy(out, ptmx) }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	send := func(s string) {
		t.Helper()
		if _, err := ptmx.Write([]byte(s)); err != nil {
			t.Fatalf("writing to the terminal: %v", err)
		}
	}
	// Markers are computed by the remote shell, so the terminal's echo
	// of what we typed never matches them.
	expect := func(marker string) {
		t.Helper()
		eventually(t, "terminal output "+marker, func() bool {
			select {
			case err := <-exited:
				t.Fatalf("exec -it exited (%v) before printing %s:\n%q", err, marker, out.String())
			default:
			}
			return strings.Contains(out.String(), marker)
		})
	}

	send("test -t 0 && test -t 1 && echo IS$((1+1))TTY\n")
	expect("IS2TTY")
	send("stty size | sed 's/ /x/'; echo SIZE$((0+1))\n")
	expect("SIZE1")
	if !strings.Contains(out.String(), "40x100") {
		t.Fatalf("remote terminal size is not 40x100:\n%q", out.String())
	}
	send(`echo "TERM=$TERM" | tr a-z A-Z` + "\n")
	expect("TERM=XTERM")

	// Resize: the kernel sends the CLI SIGWINCH, which forwards the size.
	// The resize races with the next command, so ask until it shows.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "remote terminal resized to 50x120", func() bool {
		send("stty size | sed 's/ /x/'\n")
		time.Sleep(100 * time.Millisecond)
		return strings.Contains(out.String(), "50x120")
	})

	// Ctrl-C is a keystroke for the remote terminal: it interrupts sleep
	// (without it the shell would not answer for 300s), and the shell and
	// the CLI go on.
	send("echo STARTED$((1+1)); sleep 300\n")
	expect("STARTED2")
	send("\x03")
	send("echo AFTER$((2+3))\n")
	expect("AFTER5")

	send("exit 3\n")
	err = <-exited
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exec -it exit = %v, want exit code 3; output:\n%q", err, out.String())
	}
}

// TestExecTTYWithoutTerminal: -t with stdin not a terminal warns and runs
// without one.
func TestExecTTYWithoutTerminal(t *testing.T) {
	st := devstackTarget(t)
	const name = "tty-b"
	ok(t, st, "create", "--pool", st.pool, "--name", name, "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", name) })
	r := cli(t, st, "echo piped\n", "exec", "-it", name, "--", "sh")
	if r.code != 0 || r.stdout != "piped\n" || !strings.Contains(r.stderr, "stdin is not a terminal") {
		t.Fatalf("exec -it from a pipe:\n%s", r)
	}
}

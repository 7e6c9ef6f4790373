// Package cli_test runs the agent-sandbox binary, built once in TestMain,
// against the integration stack (internal/devstack: a real apiserver, the
// controllers, the sandbox-router and one real sandboxd process per
// sandbox Pod): the CLI flow, golden `ls` output, `exec -it` through a
// real pseudo-terminal, and the MCP server over stdio and streamable HTTP.
//
// Set DEVSTACK_LOG=1 to see the stack's logs, and -update to rewrite the
// golden files.
package cli_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/devstack"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var (
	// binary is the agent-sandbox CLI under test; plugin is the same
	// binary under the name kubectl-sandbox.
	binary, plugin string

	stackOnce sync.Once
	stack     *devstack.Stack
	stackErr  error
)

func TestMain(m *testing.M) {
	testenv.ExitIfShort("the devstack", "make test-integration")
	flag.Parse()
	dir, err := os.MkdirTemp("", "agent-sandbox-cli-test-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer func() { _ = os.RemoveAll(dir) }()
		binary = filepath.Join(dir, "agent-sandbox")
		build := exec.Command("go", "build", "-o", binary, "./cmd/agent-sandbox")
		build.Dir = testenv.RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the CLI: %v\n%s", err, out)
			return 1
		}
		plugin = filepath.Join(dir, "kubectl-sandbox")
		if err := os.Symlink(binary, plugin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		code := m.Run()
		if stack != nil {
			if err := stack.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stopping devstack: %v\n", err)
			}
		}
		return code
	}()
	os.Exit(code)
}

// sharedStack starts the devstack on first use.
func sharedStack(t *testing.T) *devstack.Stack {
	t.Helper()
	testenv.SkipShortNeeds(t, "the devstack (apiserver, controller, router, sandboxd)")
	stackOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		opts := devstack.Options{WarmPoolReplicas: 3}
		if os.Getenv("DEVSTACK_LOG") != "" {
			opts.Log = os.Stderr
		}
		stack, stackErr = devstack.Start(ctx, opts)
	})
	if stackErr != nil {
		t.Fatalf("starting devstack: %v", stackErr)
	}
	return stack
}

// target is a cluster the CLI runs against: the devstack, or (for the
// *Cluster variants of the tests) a real cluster named by
// AGENT_SANDBOX_CLI_E2E_KUBECONFIG, e.g. the local cluster of
// `agent-sandbox up` (/var/lib/agent-sandbox/kubeconfig).
type target struct {
	kubeconfig, namespace, pool, template string
	// routerURL is a URL of the sandbox-router this process can reach
	// directly, if any.
	routerURL string
	// suffix makes the names and labels of a run unique, for clusters
	// that others use at the same time.
	suffix string
}

func devstackTarget(t *testing.T) *target {
	t.Helper()
	st := sharedStack(t)
	return &target{kubeconfig: st.Kubeconfig, namespace: st.Namespace, pool: st.WarmPool, template: st.Template, routerURL: st.RouterURL}
}

// clusterTarget is the real cluster of AGENT_SANDBOX_CLI_E2E_KUBECONFIG
// (pool AGENT_SANDBOX_CLI_E2E_POOL, default python-sandbox-pool, in the
// kubeconfig's namespace, which must be "default"); the test is skipped
// without it.
func clusterTarget(t *testing.T) *target {
	t.Helper()
	kc := os.Getenv("AGENT_SANDBOX_CLI_E2E_KUBECONFIG")
	if kc == "" {
		t.Skip("set AGENT_SANDBOX_CLI_E2E_KUBECONFIG to run against a real cluster")
	}
	pool := os.Getenv("AGENT_SANDBOX_CLI_E2E_POOL")
	if pool == "" {
		pool = "python-sandbox-pool"
	}
	return &target{kubeconfig: kc, namespace: "default", pool: pool, template: "python-runtime-template",
		suffix: fmt.Sprintf("-%x", time.Now().UnixNano()&0xffffff)}
}

// result is one run of the CLI.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cliTimeout bounds one CLI run, so that a hang fails the test instead of
// the whole binary; it is a guard, not an assertion.
const cliTimeout = 3 * time.Minute

// cli runs the CLI against the target with stdin (may be empty).
func cli(t *testing.T, st *target, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cliEnv(st)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%v did not finish within %s:\n%s", args, cliTimeout, r)
	}
	return r
}

// ok runs the CLI and fails the test unless it exits 0.
func ok(t *testing.T, st *target, args ...string) result {
	t.Helper()
	r := cli(t, st, "", args...)
	if r.code != 0 {
		t.Fatalf("%v failed:\n%s", args, r)
	}
	return r
}

// cliEnv is a minimal environment pointing the CLI at the target.
func cliEnv(st *target) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "TERM=xterm"}
	if st != nil {
		env = append(env, "KUBECONFIG="+st.kubeconfig)
	}
	return env
}

// oneLineError checks that a failed run printed exactly one line on
// stderr, naming the program, and returns it.
func oneLineError(t *testing.T, r result, prog string) string {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("expected a failure:\n%s", r)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, prog+": ") {
		t.Fatalf("error line %q does not start with %q:\n%s", last, prog+": ", r)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		t.Fatalf("stack trace on stderr:\n%s", r)
	}
	return last
}

// eventually polls cond until it holds or the guard deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

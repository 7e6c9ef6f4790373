package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestKubectlPlugin: installed as kubectl-sandbox the binary is
// `kubectl sandbox`, in its help and its errors.
func TestKubectlPlugin(t *testing.T) {
	for _, bin := range []struct{ path, prog string }{{binary, "agent-sandbox"}, {plugin, "kubectl sandbox"}} {
		out, err := exec.Command(bin.path, "--help").Output()
		if err != nil || !strings.Contains(string(out), bin.prog+" [command]") {
			t.Errorf("%s --help: %v\n%s", bin.path, err, out)
		}
		cmd := exec.Command(bin.path, "create", "extra-arg")
		stderr, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 || !strings.HasPrefix(string(stderr), bin.prog+": create takes no arguments") ||
			!strings.Contains(string(stderr), "fix: see `"+bin.prog+" create --help`") {
			t.Errorf("%s usage error (exit %d): %s", bin.path, cmd.ProcessState.ExitCode(), stderr)
		}
	}
}

// TestKubectlRunsPlugin: kubectl itself finds kubectl-sandbox on PATH
// and runs it (skipped without a kubectl binary).
func TestKubectlRunsPlugin(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		kubectl = filepath.Join(testenv.AssetsDir(), "kubectl")
		if _, err := os.Stat(kubectl); err != nil {
			t.Skip("no kubectl binary")
		}
	}
	st := devstackTarget(t)
	ok(t, st, "create", "--pool", st.pool, "--name", "via-kubectl", "-l", "test=kubectl")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "via-kubectl") })
	cmd := exec.Command(kubectl, "sandbox", "ls", "-l", "test=kubectl", "-o", "name")
	cmd.Env = append(cliEnv(st), "PATH="+filepath.Dir(plugin)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "via-kubectl\n" {
		t.Errorf("kubectl sandbox ls: %v\n%s", err, out)
	}
}

// TestErrorsAreOneLine: failures print one line with a fix and exit 1
// (2 for usage errors), never a stack trace.
func TestErrorsAreOneLine(t *testing.T) {
	st := devstackTarget(t)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"exec", "nope", "--", "true"}, 1, []string{`sandbox "nope" not found in namespace "default"`, "fix: list sandboxes"}},
		{[]string{"rm", "nope"}, 1, []string{`sandbox "nope" not found`}},
		{[]string{"create", "--pool", "no-such-pool", "--wait", "--timeout", "20s"}, 1, []string{"SandboxWarmPool default/no-such-pool not found", "fix: warm pools in default"}},
		{[]string{"create", "--pool", "a", "--template", "b"}, 2, []string{"--pool and --template exclude each other"}},
		{[]string{"cp", "a", "b"}, 2, []string{"one of SRC and DEST must be a sandbox path"}},
		{[]string{"exec", "x"}, 2, []string{"exec needs a COMMAND"}},
		{[]string{"ls", "-o", "xml"}, 2, []string{`unknown output format "xml"`}},
		{[]string{"nosuchcommand"}, 2, []string{`unknown command "nosuchcommand"`}},
		{[]string{"ls", "--no-such-flag"}, 2, []string{"unknown flag: --no-such-flag"}},
		{[]string{"ls", "--kubeconfig", "/nonexistent/kubeconfig"}, 1, []string{"kubeconfig", "fix:"}},
		{[]string{"ls", "-n", "empty-ns"}, 0, nil},
	} {
		r := cli(t, st, "", tc.args...)
		if r.code != tc.code {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, r.code, tc.code, r)
			continue
		}
		if tc.code == 0 {
			continue
		}
		line := oneLineError(t, r, "agent-sandbox")
		if strings.Count(strings.TrimSpace(r.stderr), "\n") > 2 {
			t.Errorf("%v: too much on stderr:\n%s", tc.args, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%v: %q lacks %q", tc.args, line, w)
			}
		}
	}
	// The failed create above left nothing behind.
	r := ok(t, st, "ls", "-o", "json")
	var list struct{ Items []struct{ Name, Pool string } }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	for _, it := range list.Items {
		if it.Pool == "no-such-pool" {
			t.Errorf("a failed create left %s behind", it.Name)
		}
	}
}

// TestLogs: the devstack has no kubelet to serve pod logs, so logs fails
// there; it must fail as one clear line (it is exercised for real against
// a cluster in test/e2e).
func TestLogs(t *testing.T) {
	st := devstackTarget(t)
	ok(t, st, "create", "--pool", st.pool, "--name", "logs-a", "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "logs-a") })
	r := cli(t, st, "", "logs", "logs-a", "--tail", "5")
	if r.code == 0 {
		return // a stack that serves logs: fine too
	}
	line := oneLineError(t, r, "agent-sandbox")
	if !strings.Contains(line, "reading the logs of pod default/") || !strings.Contains(line, "fix: check the pod") {
		t.Errorf("logs: %q", line)
	}
}

// TestCompletion: cobra's completion scripts, and sandbox names completed
// from the cluster.
func TestCompletion(t *testing.T) {
	st := devstackTarget(t)
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if r := ok(t, st, "completion", shell); len(r.stdout) < 100 {
			t.Errorf("completion %s: %q", shell, r.stdout)
		}
	}
	ok(t, st, "create", "--pool", st.pool, "--name", "complete-me")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "complete-me") })
	r := ok(t, st, "__complete", "exec", "")
	if !strings.Contains(r.stdout, "complete-me\n") {
		t.Errorf("exec NAME completion:\n%s", r.stdout)
	}
	r = ok(t, st, "__complete", "create", "--pool", "")
	if !strings.Contains(r.stdout, st.pool+"\n") {
		t.Errorf("--pool completion:\n%s", r.stdout)
	}
}

// TestVersion prints a version line and JSON.
func TestVersion(t *testing.T) {
	r := cli(t, nil, "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "agent-sandbox ") {
		t.Errorf("version:\n%s", r)
	}
	r = cli(t, nil, "", "version", "-o", "json")
	var v map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v["goVersion"] == nil || v["version"] == nil {
		t.Errorf("version -o json: %v\n%s", err, r)
	}
}

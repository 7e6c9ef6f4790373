package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlow is the life of one sandbox through the CLI: create from the
// warm pool, exec (streams, exit codes, stdin), cp both ways (files and
// directory trees), suspend, resume, rm.
func TestFlow(t *testing.T) { runFlow(t, devstackTarget(t)) }

// TestFlowCluster is TestFlow on a real cluster (gVisor pods with the
// local cluster), when AGENT_SANDBOX_CLI_E2E_KUBECONFIG is set.
func TestFlowCluster(t *testing.T) { runFlow(t, clusterTarget(t)) }

func runFlow(t *testing.T, st *target) {
	t.Helper()
	name, label := "flow-a"+st.suffix, "test=flow"+st.suffix
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", name) })

	r := ok(t, st, "create", "--pool", st.pool, "--name", name, "-l", label, "--wait")
	if r.stdout != name+"\n" {
		t.Fatalf("create printed %q, want the name", r.stdout)
	}
	for _, want := range []string{"SandboxClaim default/" + name + " created", "bound to Sandbox", "sandbox " + name + " is Ready ("} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("create progress lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "\r") || strings.Contains(r.stderr, "[") {
		t.Errorf("progress off a terminal should be plain lines:\n%q", r.stderr)
	}

	// exec: separate streams, the exit code becomes ours.
	r = cli(t, st, "", "exec", name, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("exec exit 7:\n%s", r)
	}
	r = ok(t, st, "exec", name, "--", "pwd")
	// The workspace: the devstack's per-Pod directory, /app in the image.
	if wd := strings.TrimSpace(r.stdout); !strings.HasPrefix(wd, "/") || (st.suffix == "" && !strings.HasSuffix(wd, "workspace")) {
		t.Errorf("commands should start in the workspace, pwd = %q", r.stdout)
	}
	// -i forwards stdin, and EOF ends it.
	r = cli(t, st, "line one\nline two\n", "exec", "-i", name, "--", "sh", "-c", "tr a-z A-Z; echo done")
	if r.code != 0 || r.stdout != "LINE ONE\nLINE TWO\ndone\n" {
		t.Fatalf("exec -i:\n%s", r)
	}
	// Without -i stdin is closed: cat ends at once.
	r = cli(t, st, "ignored\n", "exec", name, "--", "cat")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exec without -i:\n%s", r)
	}
	r = ok(t, st, "exec", name, "-e", "GREETING=hi there", "-w", ".", "--", "sh", "-c", `echo "$GREETING"`)
	if r.stdout != "hi there\n" {
		t.Errorf("exec -e: %q", r.stdout)
	}
	// Other ways to the router: a port-forward of the CLI's own to the
	// router of another namespace, and a router URL.
	r = ok(t, st, "exec", name, "--router-namespace", "agent-sandbox-system", "-v", "--", "echo", "via tunnel")
	if r.stdout != "via tunnel\n" || !strings.Contains(r.stderr, "port-forward to the sandbox-router") {
		t.Errorf("exec --router-namespace:\n%s", r)
	}
	if st.routerURL != "" {
		r = ok(t, st, "exec", name, "--router-url", st.routerURL, "--", "echo", "via url")
		if r.stdout != "via url\n" {
			t.Errorf("exec --router-url:\n%s", r)
		}
	}
	line := oneLineError(t, cli(t, st, "", "exec", name, "--", "no-such-binary-xyz"), "agent-sandbox")
	if !strings.Contains(line, "no-such-binary-xyz") || !strings.Contains(line, "fix:") {
		t.Errorf("missing binary: %q", line)
	}

	// cp: a tree in, back out, and single files.
	src := t.TempDir()
	files := map[string]string{
		"tree/a.txt":         "alpha\n",
		"tree/sub/b.txt":     "beta\n",
		"tree/sub/deep/c.sh": "#!/bin/sh\necho c\n",
		"tree/bin.dat":       "\x00\x01\xfe\xff binary",
	}
	for p, c := range files {
		full := filepath.Join(src, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(c), mode); err != nil {
			t.Fatal(err)
		}
	}
	ok(t, st, "cp", filepath.Join(src, "tree"), name+":copied")
	r = ok(t, st, "exec", name, "--", "sh", "-c", "cat copied/sub/b.txt && ./copied/sub/deep/c.sh && find copied -type f | sort")
	if want := "beta\nc\ncopied/a.txt\ncopied/bin.dat\ncopied/sub/b.txt\ncopied/sub/deep/c.sh\n"; r.stdout != want {
		t.Errorf("tree in the sandbox:\n%s\nwant:\n%s", r.stdout, want)
	}
	// Into an existing directory: the copy goes inside it.
	ok(t, st, "cp", filepath.Join(src, "tree", "a.txt"), name+":copied/sub")
	ok(t, st, "cp", filepath.Join(src, "tree", "a.txt"), name+":") // the workspace
	ok(t, st, "cp", filepath.Join(src, "tree", "a.txt"), name+":new/dir/renamed.txt")
	r = ok(t, st, "exec", name, "--", "cat", "copied/sub/a.txt", "a.txt", "new/dir/renamed.txt")
	if r.stdout != strings.Repeat("alpha\n", 3) {
		t.Errorf("single-file copies: %q", r.stdout)
	}

	out := t.TempDir()
	ok(t, st, "cp", name+":copied", filepath.Join(out, "back"))
	for p, c := range files {
		got, err := os.ReadFile(filepath.Join(out, "back", strings.TrimPrefix(p, "tree/")))
		if err != nil || !bytes.Equal(got, []byte(c)) {
			t.Errorf("%s came back as %q, %v", p, got, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(out, "back", "sub", "deep", "c.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("mode of c.sh not kept: %v, %v", fi, err)
	}
	// Into an existing local directory, and a single file to a new name.
	ok(t, st, "cp", name+":copied/sub", out)
	ok(t, st, "cp", name+":copied/a.txt", filepath.Join(out, "one.txt"))
	for p, want := range map[string]string{"sub/b.txt": "beta\n", "one.txt": "alpha\n"} {
		if got, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", p, got, err)
		}
	}
	line = oneLineError(t, cli(t, st, "", "cp", name+":missing.txt", out), "agent-sandbox")
	if !strings.Contains(line, "missing.txt") {
		t.Errorf("cp of a missing file: %q", line)
	}
	// Symlinks travel as symlinks (what an archive may do with them is
	// tested in internal/cli/remote).
	ok(t, st, "exec", name, "--", "sh", "-c", "mkdir -p evil && ln -s ../../.. evil/up")
	ok(t, st, "cp", name+":evil", filepath.Join(out, "evil"))
	if _, err := os.Lstat(filepath.Join(out, "evil", "up")); err != nil {
		t.Errorf("symlink not copied: %v", err)
	}

	// suspend: the Pod goes, exec says how to get it back.
	r = ok(t, st, "suspend", name, "--wait")
	if !strings.Contains(r.stderr, name+" is Suspended") {
		t.Errorf("suspend progress:\n%s", r.stderr)
	}
	r = ok(t, st, "ls", "-l", label, "-o", "json")
	var list struct {
		Items []struct{ Name, State, Pod string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 1 ||
		list.Items[0].State != "Suspended" || list.Items[0].Pod != "" {
		t.Fatalf("ls after suspend: %v\n%s", err, r.stdout)
	}
	// exec on a suspended sandbox resumes it and runs the command.
	r = ok(t, st, "exec", name, "--", "echo", "woke up")
	if r.stdout != "woke up\n" || !strings.Contains(r.stderr, name+" was suspended: resuming it") {
		t.Errorf("exec on a suspended sandbox:\n%s", r)
	}

	// suspend and resume again: a new Pod, exec works again.
	ok(t, st, "suspend", name, "--wait")
	r = ok(t, st, "resume", name, "--wait")
	if !strings.Contains(r.stderr, name+" is Running") {
		t.Errorf("resume progress:\n%s", r.stderr)
	}
	r = ok(t, st, "exec", name, "--", "echo", "back")
	if r.stdout != "back\n" {
		t.Errorf("exec after resume: %q", r.stdout)
	}

	// rm: gone, and commands say so.
	ok(t, st, "rm", name, "--wait")
	r = ok(t, st, "ls", "-l", label)
	if r.stdout != "No sandboxes found.\n" {
		t.Errorf("ls after rm: %q", r.stdout)
	}
	line = oneLineError(t, cli(t, st, "", "exec", name, "--", "true"), "agent-sandbox")
	if !strings.Contains(line, `sandbox "`+name+`" not found in namespace "default"`) || !strings.Contains(line, "ls -n default") {
		t.Errorf("exec on a removed sandbox: %q", line)
	}
	ok(t, st, "rm", name, "--ignore-not-found")
}

package cli_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestLsNamedWatchDescribe: `ls NAME` and `get NAME`, ORIGIN and EXPIRES,
// `ls --watch` printing a row when a sandbox appears and changes, and
// `describe` with conditions and events.
func TestLsNamedWatchDescribe(t *testing.T) {
	st := devstackTarget(t)
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "view-a", "view-b") })

	// --watch, started before the sandbox exists.
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	watch := exec.CommandContext(ctx, binary, "ls", "--watch", "-l", "test=views")
	watch.Env = cliEnv(st)
	var wout, werr testenv.SyncBuffer
	watch.Stdout, watch.Stderr = &wout, &werr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Process.Kill(); _ = watch.Wait() }()
	eventually(t, "the watch's first table", func() bool { return strings.Contains(wout.String(), "No sandboxes found.") })

	ok(t, st, "create", "--pool", st.pool, "--name", "view-a", "-l", "test=views", "--wait", "--shutdown-after", "30m")
	ok(t, st, "create", "--template", st.template, "--name", "view-b", "-l", "test=views", "--wait", "--shutdown-after", "0")
	eventually(t, "watch rows of the new sandboxes, Running", func() bool {
		var a, b bool
		for _, l := range strings.Split(wout.String(), "\n") {
			f := strings.Fields(l)
			a = a || len(f) > 3 && f[0] == "view-a" && f[3] == "Running"
			b = b || len(f) > 3 && f[0] == "view-b" && f[3] == "Running"
		}
		return a && b
	})
	ok(t, st, "rm", "view-b", "--wait")
	eventually(t, "a Deleted row", func() bool {
		for _, l := range strings.Split(wout.String(), "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[0] == "view-b" && f[3] == "Deleted" {
				return true
			}
		}
		return false
	})
	ok(t, st, "create", "--template", st.template, "--name", "view-b", "-l", "test=views", "--wait", "--shutdown-after", "0")

	for _, verb := range []string{"ls", "get"} {
		r := ok(t, st, verb, "view-a")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "view-a ") {
			t.Errorf("%s view-a:\n%s", verb, r.stdout)
		}
	}
	r := ok(t, st, "ls", "view-a", "view-b", "-o", "json")
	var list struct {
		Items []struct {
			Name, Origin string
			ExpiresAt    *time.Time
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("ls <name> <name> -o json: %v\n%s", err, r.stdout)
	}
	a, b := list.Items[0], list.Items[1]
	if a.Origin != "claimed/warm" || a.ExpiresAt == nil || time.Until(*a.ExpiresAt) > 30*time.Minute || time.Until(*a.ExpiresAt) < 28*time.Minute {
		t.Errorf("view-a: %+v", a)
	}
	if b.Origin != "direct" || b.ExpiresAt != nil {
		t.Errorf("view-b: %+v", b)
	}
	r = ok(t, st, "ls", "-l", "test=views")
	for _, want := range []string{"ORIGIN", "EXPIRES", "claimed/warm", "direct", "never"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("ls lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := ok(t, st, "ls", "--warm", "-o", "wide"); !strings.Contains(r.stdout, " idle ") {
		t.Errorf("ls --warm shows no idle member:\n%s", r.stdout)
	}
	line := oneLineError(t, cli(t, st, "", "get", "no-such-sandbox"), "agent-sandbox")
	if !strings.Contains(line, `sandbox "no-such-sandbox" not found`) {
		t.Errorf("get of a missing sandbox: %q", line)
	}

	// (TestMissingImageSurfaced checks the events part.)
	r = ok(t, st, "describe", "view-a")
	for _, want := range []string{"Name:", "view-a", "Origin:", "claimed/warm", "Expires:", "Conditions:", "SandboxClaim", "Ready", "DependenciesReady", "Events:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestCpStdio: `cp NAME:path -` writes the file to stdout, `cp - NAME:path`
// reads stdin into a file.
func TestCpStdio(t *testing.T) {
	st := devstackTarget(t)
	ok(t, st, "create", "--pool", st.pool, "--name", "cp-stdio", "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "cp-stdio") })
	payload := "line 1\n\x00binary\xff\nend"
	if r := cli(t, st, payload, "cp", "-", "cp-stdio:in/data.bin"); r.code != 0 {
		t.Fatalf("cp - NAME:path:\n%s", r)
	}
	r := ok(t, st, "cp", "cp-stdio:in/data.bin", "-", "-q")
	if r.stdout != payload {
		t.Errorf("cp NAME:path - = %q, want %q", r.stdout, payload)
	}
}

// TestVersionAndStatusServer: version and status report the cluster's
// side (Kubernetes version, router Pods and their images), as text and
// JSON.
func TestVersionAndStatusServer(t *testing.T) {
	st := devstackTarget(t)
	r := ok(t, st, "version", "-o", "json")
	var v struct {
		Version string
		Server  struct {
			Kubernetes string
			Components []struct {
				Name    string
				Ready   int
				Healthy bool
				Images  []string
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Version == "" || !strings.HasPrefix(v.Server.Kubernetes, "v1.") {
		t.Fatalf("version -o json: %v\n%s", err, r.stdout)
	}
	var router bool
	for _, c := range v.Server.Components {
		if c.Name == "sandbox-router" && c.Healthy && c.Ready > 0 && len(c.Images) > 0 {
			router = true
		}
	}
	if !router {
		t.Errorf("version does not show a healthy router:\n%s", r.stdout)
	}
	r = ok(t, st, "version")
	if !strings.HasPrefix(r.stdout, "agent-sandbox ") || !strings.Contains(r.stdout, "kubernetes: v1.") || !strings.Contains(r.stdout, "sandbox-router") {
		t.Errorf("version:\n%s", r.stdout)
	}
	r = ok(t, st, "status", "-o", "json")
	var s struct {
		Local  struct{ Running bool }
		Server struct {
			Kubernetes string
			Components []struct{ Name string }
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || !strings.HasPrefix(s.Server.Kubernetes, "v1.") || len(s.Server.Components) != 2 {
		t.Errorf("status -o json: %v\n%s", err, r.stdout)
	}
	r = ok(t, st, "status")
	if !strings.Contains(r.stdout, "COMPONENT") || !strings.Contains(r.stdout, "agent-sandbox-controller") {
		t.Errorf("status:\n%s", r.stdout)
	}
}

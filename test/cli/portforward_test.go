package cli_test

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestPortForward: `port-forward NAME 0:8080` serves sandboxd's REST API
// of that sandbox on a local port, through the sandbox-router.
func TestPortForward(t *testing.T) {
	st := devstackTarget(t)
	ok(t, st, "create", "--pool", st.pool, "--name", "pf", "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "pf") })
	ok(t, st, "exec", "pf", "--", "sh", "-c", "echo forwarded > marker.txt")

	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	pf := exec.CommandContext(ctx, binary, "port-forward", "pf", "0:8080")
	pf.Env = cliEnv(st)
	var out, errOut testenv.SyncBuffer
	pf.Stdout, pf.Stderr = &out, &errOut
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	addrRE := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> pf:8080`)
	var addr string
	eventually(t, "the Forwarding line", func() bool {
		m := addrRE.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	resp, err := http.Get("http://" + addr + "/v1/files/marker.txt")
	if err != nil {
		t.Fatalf("GET through the port-forward: %v\nstderr: %s", err, errOut.String())
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "forwarded" {
		t.Errorf("GET /v1/files/marker.txt = %d %q", resp.StatusCode, body)
	}

	line := oneLineError(t, cli(t, st, "", "port-forward", "pf", "x:y"), "agent-sandbox")
	if !strings.Contains(line, `invalid remote port "y"`) {
		t.Errorf("bad port spec: %q", line)
	}
}

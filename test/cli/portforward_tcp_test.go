package cli_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestPortForwardTCP: `port-forward --tcp` carries raw bytes through the
// router's TCP tunnel. The bytes here are an HTTP/1.0 request written by
// hand to sandboxd's REST port: the router does not parse them (no routing
// headers are in them), and the HTTP/1.0 answer ends with the server's
// FIN, which must arrive as EOF. A port the sandbox
// does not declare is refused per connection, with the router's reason on
// stderr, and the forward keeps serving.
func TestPortForwardTCP(t *testing.T) {
	st := devstackTarget(t)
	ok(t, st, "create", "--pool", st.pool, "--name", "pftcp", "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "pftcp") })
	ok(t, st, "exec", "pftcp", "--", "sh", "-c", "echo raw-bytes > marker.txt")

	start := func(spec string) (addr string, errOut *testenv.SyncBuffer) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		pf := exec.CommandContext(ctx, binary, "port-forward", "--tcp", "pftcp", spec)
		pf.Env = cliEnv(st)
		var out testenv.SyncBuffer
		errOut = &testenv.SyncBuffer{}
		pf.Stdout, pf.Stderr = &out, errOut
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait(); cancel() })
		re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> pftcp:\d+ \(raw TCP`)
		eventually(t, "the Forwarding line", func() bool {
			m := re.FindStringSubmatch(out.String())
			if m != nil {
				addr = m[1]
			}
			return m != nil
		})
		return addr, errOut
	}

	addr, errOut := start("0:8080")
	for i := range 3 { // several connections, one tunnel each
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(cliTimeout))
		if _, err := io.WriteString(c, "GET /v1/files/marker.txt HTTP/1.0\r\nHost: sandbox\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: reading the answer: %v\nstderr: %s", i, err, errOut.String())
		}
		body, err := io.ReadAll(resp.Body)
		_ = c.Close()
		if err != nil || resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "raw-bytes" {
			t.Fatalf("connection %d: %d %q %v", i, resp.StatusCode, body, err)
		}
	}

	refusedAddr, refusedErr := start("0:2222")
	c, err := net.DialTimeout("tcp", refusedAddr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(cliTimeout))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a refused tunnel delivered data: %d %v", n, err)
	}
	_ = c.Close()
	eventually(t, "the refusal on stderr", func() bool {
		return strings.Contains(refusedErr.String(), "403 Forbidden: Port 2222 is not exposed by sandbox")
	})
	// Still serving after a refusal: the next connection is answered (and
	// refused) too.
	c2, err := net.DialTimeout("tcp", refusedAddr, 10*time.Second)
	if err != nil {
		t.Fatalf("forward stopped after a refusal: %v", err)
	}
	_ = c2.Close()
}

// TestPortForwardURL: the HTTP forward prints a URL for the port, and the
// URL serves the sandbox's port; a wildcard --address prints localhost.
func TestPortForwardURL(t *testing.T) {
	st := devstackTarget(t)
	ok(t, st, "create", "--pool", st.pool, "--name", "pfurl", "--wait")
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "pfurl") })
	ok(t, st, "exec", "pfurl", "--", "sh", "-c", "echo by-url > marker.txt")
	for _, c := range []struct{ address, re string }{
		{"127.0.0.1", `URL: (http://127\.0\.0\.1:\d+/)\n`},
		{"0.0.0.0", `URL: (http://localhost:\d+/)\n`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		pf := exec.CommandContext(ctx, binary, "port-forward", "--address", c.address, "pfurl", "0:8080")
		pf.Env = cliEnv(st)
		var out, errOut testenv.SyncBuffer
		pf.Stdout, pf.Stderr = &out, &errOut
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(c.re)
		var u string
		eventually(t, "the URL line", func() bool {
			if m := re.FindStringSubmatch(out.String()); m != nil {
				u = m[1]
			}
			return u != ""
		})
		resp, err := http.Get(u + "v1/files/marker.txt")
		if err != nil {
			t.Fatalf("GET the printed URL: %v\nstderr: %s", err, errOut.String())
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "by-url" {
			t.Errorf("%s: %d %q", u, resp.StatusCode, body)
		}
		_ = pf.Process.Kill()
		_ = pf.Wait()
		cancel()
	}
}

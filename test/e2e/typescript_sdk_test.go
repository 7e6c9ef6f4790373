package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// typescriptSDK builds the TypeScript SDK of this checkout and installs it
// into the examples' project (a file: dependency), returning that
// directory. npm must reach its registry.
func typescriptSDK(t *testing.T) string {
	t.Helper()
	sdk := filepath.Join(repoRoot(), "clients", "typescript")
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund", "--loglevel=error"}, {"run", "-s", "build"}} {
		cmd := exec.Command("npm", args...)
		cmd.Dir = sdk
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm %s in clients/typescript: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	examples := filepath.Join(repoRoot(), "examples", "typescript-sdk")
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = examples
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install in examples/typescript-sdk: %v\n%s", err, out)
	}
	return examples
}

// runNode runs a Node script with the local cluster's kubeconfig. A script
// outside dir is evaluated as a module from dir, so that its imports resolve
// against dir's node_modules (Node resolves a file's imports from the file's
// own directory).
func runNode(t *testing.T, dir, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command("node", script)
	if filepath.IsAbs(script) {
		src, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command("node", "--input-type=module", "-e", string(src))
	}
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "KUBECONFIG="+cluster.KubeconfigPath())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", filepath.Base(script), err, out)
	}
	return string(out)
}

// The TypeScript SDK on real gVisor pods: the examples (seed flow and the
// agent tool, default local tunnel), a streaming run with stdin, and time
// to interactive over warm claims (printed, not asserted).
func TestTypeScriptSDKOnGVisor(t *testing.T) {
	c := ensureController(t)
	router := routerURL(t, c)
	dir := typescriptSDK(t)

	if out := runNode(t, dir, "hello.mjs"); !strings.Contains(out, "Hello, World! Greetings from inside the sandbox.") {
		t.Errorf("hello.mjs printed %q", out)
	}
	if out := runNode(t, dir, "agent-tool.mjs"); !strings.Contains(out, "The sum of the first ten squares is 385.") {
		t.Errorf("agent-tool.mjs printed %q", out)
	}

	ns, pool := ttiPool(t, c, 3)
	claims := envInt("AGENT_SANDBOX_E2E_TTI_CLAIMS", 50)
	load := loadAverage()
	out := runNode(t, dir, filepath.Join(repoRoot(), "test", "e2e", "testdata", "ts_sdk.mjs"),
		"NAMESPACE="+ns, "WARMPOOL="+pool, "ROUTER_URL="+router, "COUNT="+strconv.Itoa(claims))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Seed          string `json:"seed"`
		Kernel        string `json:"kernel"`
		SeedClaimGone bool   `json:"seedClaimGone"`
		Streamed      string `json:"streamed"`
		StreamChunks  int    `json:"streamChunks"`
		StreamExit    int    `json:"streamExit"`
		DisposedGone  bool   `json:"disposedClaimGone"`
		TTI           struct {
			Count, Warm        int
			P50, P90, P99, Max float64
		} `json:"tti"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("ts_sdk.mjs printed no result line: %v\n%s", err, out)
	}
	if res.Seed != "Hello, World! Greetings from inside the sandbox.\n" || !res.SeedClaimGone {
		t.Errorf("seed flow: output %q, claim gone %v", res.Seed, res.SeedClaimGone)
	}
	if !strings.Contains(strings.ToLower(res.Kernel), "gvisor") {
		t.Errorf("the sandbox is not a gVisor one: /proc/version = %q", res.Kernel)
	}
	if res.Streamed != "0\n1\n2\necho:ping\n" || res.StreamExit != 0 {
		t.Errorf("streaming run: stdout %q, exit %d", res.Streamed, res.StreamExit)
	}
	if !res.DisposedGone {
		t.Error("Symbol.asyncDispose left the claim behind")
	}
	// The script waits for the pool's readyReplicas before each claim, but
	// under load that status can run ahead of the claim controller's own
	// view of its candidates, and a claim then goes cold (seen: 1 in 50 at
	// load 7-11). The Go SDK's e2e holds the all-warm check; here the
	// number that matters is the time, and nearly all claims must be warm.
	if res.TTI.Count != claims || res.TTI.Warm*10 < claims*9 {
		t.Errorf("%d claims measured, %d warm, want %d with at least 90%% warm", res.TTI.Count, res.TTI.Warm, claims)
	}
	t.Logf("TypeScript SDK time to interactive over %d gVisor claims (%d warm) through the router (load %s before, %s after): p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms",
		res.TTI.Count, res.TTI.Warm, load, loadAverage(), res.TTI.P50, res.TTI.P90, res.TTI.P99, res.TTI.Max)
}

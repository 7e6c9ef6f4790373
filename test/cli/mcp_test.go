package cli_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpTimeout guards one MCP test's calls.
const mcpTimeout = 4 * time.Minute

// progressLog records progress notifications by token.
type progressLog struct {
	mu   sync.Mutex
	msgs map[string][]string
}

func (p *progressLog) handler(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tok, _ := req.Params.ProgressToken.(string)
	p.msgs[tok] = append(p.msgs[tok], req.Params.Message)
}

func (p *progressLog) get(tok string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs[tok])
}

// connectStdio starts `agent-sandbox mcp` and connects one client session
// to it over stdio.
func connectStdio(ctx context.Context, t *testing.T, st *target, prog *progressLog) *sdk.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, "mcp")
	cmd.Env = cliEnv(st)
	opts := &sdk.ClientOptions{}
	if prog != nil {
		opts.ProgressNotificationHandler = prog.handler
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "cli-test", Version: "1"}, opts)
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to agent-sandbox mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and returns its structured result; wantErr says
// whether the call must be a tool error (then the error text is returned
// under "error").
func call(ctx context.Context, t *testing.T, cs *sdk.ClientSession, params *sdk.CallToolParams, wantErr bool) map[string]any {
	t.Helper()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("%s: protocol error: %v", params.Name, err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError != wantErr {
		t.Fatalf("%s(%v): isError=%v, want %v: %s", params.Name, params.Arguments, res.IsError, wantErr, text)
	}
	if wantErr {
		return map[string]any{"error": text}
	}
	out := map[string]any{}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", params.Name, b, err)
	}
	return out
}

func tool(name string, args map[string]any) *sdk.CallToolParams {
	return &sdk.CallToolParams{Name: name, Arguments: args}
}

// TestMCPRawProtocol speaks JSON-RPC to the stdio server by hand: the
// initialize handshake and tools/list, as any MCP client would send them.
func TestMCPRawProtocol(t *testing.T) {
	st := devstackTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), mcpTimeout)
	defer cancel()
	// The lifetime of sandboxes whose call sets none is the server's.
	cmd := exec.CommandContext(ctx, binary, "mcp", "--default-shutdown-after", "1h")
	cmd.Env = cliEnv(st)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	rpc := func(msg string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(msg, `"id"`) {
			return nil
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s: %v", msg, lines.Err())
		}
		var resp map[string]any
		if err := json.Unmarshal(lines.Bytes(), &resp); err != nil {
			t.Fatalf("answer %q: %v", lines.Text(), err)
		}
		return resp
	}
	init := rpc(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`)
	result, _ := init["result"].(map[string]any)
	info, _ := result["serverInfo"].(map[string]any)
	if result["protocolVersion"] != "2025-06-18" || info["name"] != "K8sAgentSandbox" {
		t.Fatalf("initialize = %v", init)
	}
	if _, ok := result["capabilities"].(map[string]any)["tools"]; !ok {
		t.Errorf("no tools capability: %v", result)
	}
	rpc(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	list := rpc(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	tools, _ := list["result"].(map[string]any)["tools"].([]any)
	var names []string
	for _, tl := range tools {
		tool := tl.(map[string]any)
		names = append(names, tool["name"].(string))
		if tool["name"] == "create_sandbox" {
			props, _ := tool["inputSchema"].(map[string]any)["properties"].(map[string]any)
			shutdown, _ := props["shutdown_after_seconds"].(map[string]any)
			if shutdown["default"] != 3600.0 {
				t.Errorf("shutdown_after_seconds default = %v, want 3600 (--default-shutdown-after 1h)", shutdown["default"])
			}
		}
	}
	slices.Sort(names)
	want := []string{"create_sandbox", "delete_sandbox", "download_file", "execute_command", "file_exists", "list_files", "upload_file"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("mcp exit after stdin closed: %v", err)
	}
}

// TestMCPStdio calls every tool through two stdio sessions and checks
// that neither can see or touch the other's sandbox.
func TestMCPStdio(t *testing.T) { runMCPStdio(t, devstackTarget(t)) }

// TestMCPStdioCluster is TestMCPStdio on a real cluster, when
// AGENT_SANDBOX_CLI_E2E_KUBECONFIG is set.
func TestMCPStdioCluster(t *testing.T) { runMCPStdio(t, clusterTarget(t)) }

func runMCPStdio(t *testing.T, st *target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mcpTimeout)
	defer cancel()
	prog := &progressLog{msgs: map[string][]string{}}
	a := connectStdio(ctx, t, st, prog)
	b := connectStdio(ctx, t, st, nil)

	lt, err := a.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if tl.Name == "execute_command" {
			schema, _ := json.Marshal(tl.InputSchema)
			if !strings.Contains(string(schema), `"timeout":{"default":60,`) || !strings.Contains(string(schema), `"default":60`) {
				t.Errorf("execute_command schema: %s", schema)
			}
		}
	}

	// create_sandbox: with labels and pod metadata, reporting progress.
	create := tool("create_sandbox", map[string]any{
		"warmpool": st.pool, "labels": map[string]any{"team": "mcp" + st.suffix},
		"pod_labels": map[string]any{"sandbox.users.io/tier": "agent"}, "shutdown_after_seconds": 600,
	})
	create.SetProgressToken("create")
	out := call(ctx, t, a, create, false)
	claim, _ := out["sandbox_claim_name"].(string)
	if !strings.HasPrefix(claim, "sandbox-claim-") {
		t.Fatalf("create_sandbox = %v", out)
	}
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", claim) })
	// Notifications are handled asynchronously by the client, so they may
	// trail the result.
	eventually(t, "create progress up to \"sandbox ready\"", func() bool {
		return slices.Contains(prog.get("create"), "sandbox ready")
	})
	if msgs := prog.get("create"); !strings.HasPrefix(msgs[0], "claim "+claim) {
		t.Errorf("create progress: %q", msgs)
	}
	// The claim carries the session label and the requested metadata.
	r := ok(t, st, "ls", "-l", "team=mcp"+st.suffix, "-o", "json")
	if !strings.Contains(r.stdout, claim) || !strings.Contains(r.stdout, `"mcp.k8s-agent-sandbox/session-id"`) {
		t.Errorf("claim of create_sandbox:\n%s", r.stdout)
	}

	args := func(extra map[string]any) map[string]any {
		m := map[string]any{"sandbox_claim_name": claim, "namespace": st.namespace}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}

	// execute_command: result, and output streamed as progress.
	out = call(ctx, t, a, tool("execute_command", args(map[string]any{"command": "echo out; echo err >&2; exit 3"})), false)
	if out["exit_code"] != 3.0 || out["stdout"] != "out\n" || out["stderr"] != "err\n" {
		t.Errorf("execute_command = %v", out)
	}
	// Output streams as progress while the command runs: it waits for a
	// file that the test only creates once "first" has arrived.
	long := tool("execute_command", args(map[string]any{
		"command": "echo first; while [ ! -e go.flag ]; do sleep 0.05; done; echo second", "timeout": 120,
	}))
	long.SetProgressToken("long")
	longDone := make(chan map[string]any, 1)
	go func() {
		res, err := a.CallTool(ctx, long)
		out := map[string]any{"err": err}
		if err == nil {
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &out)
		}
		longDone <- out
	}()
	eventually(t, "\"first\" as progress while the command runs", func() bool {
		return strings.Contains(strings.Join(prog.get("long"), ""), "first")
	})
	call(ctx, t, a, tool("upload_file", args(map[string]any{"path": "go.flag", "content": ""})), false)
	if out := <-longDone; out["stdout"] != "first\nsecond\n" {
		t.Errorf("long command = %v", out)
	}
	eventually(t, "\"second\" as progress", func() bool {
		return strings.Contains(strings.Join(prog.get("long"), ""), "second")
	})
	out = call(ctx, t, a, tool("execute_command", args(map[string]any{"command": "sleep 30", "timeout": 1})), true)
	if !strings.Contains(out["error"].(string), "did not finish within 1 seconds") {
		t.Errorf("timeout: %v", out)
	}

	// Files: text, binary, nested, list, exists.
	out = call(ctx, t, a, tool("upload_file", args(map[string]any{"path": "notes.txt", "content": "hello\n"})), false)
	if out["bytes_written"] != 6.0 {
		t.Errorf("upload_file = %v", out)
	}
	blob := []byte{0, 1, 2, 0xfe, 0xff}
	call(ctx, t, a, tool("upload_file", args(map[string]any{
		"path": "/data/deep/blob.bin", "content": base64.StdEncoding.EncodeToString(blob), "binary": true,
	})), false)
	out = call(ctx, t, a, tool("download_file", args(map[string]any{"path": "notes.txt"})), false)
	if out["content"] != "hello\n" || out["bytes_read"] != 6.0 {
		t.Errorf("download_file = %v", out)
	}
	out = call(ctx, t, a, tool("download_file", args(map[string]any{"path": "data/deep/blob.bin", "binary": true})), false)
	if out["content"] != base64.StdEncoding.EncodeToString(blob) {
		t.Errorf("binary download = %v", out)
	}
	out = call(ctx, t, a, tool("download_file", args(map[string]any{"path": "data/deep/blob.bin"})), true)
	if !strings.Contains(out["error"].(string), "binary=true") {
		t.Errorf("non-UTF-8 download without binary: %v", out)
	}
	out = call(ctx, t, a, tool("list_files", args(map[string]any{"path": "."})), false)
	entries, _ := out["entries"].([]any)
	var names []string
	for _, e := range entries {
		m := e.(map[string]any)
		names = append(names, m["name"].(string)+":"+m["type"].(string))
		if m["mod_time"].(float64) < 1e9 {
			t.Errorf("mod_time %v is not epoch seconds", m["mod_time"])
		}
	}
	if !slices.Contains(names, "notes.txt:file") || !slices.Contains(names, "data:directory") || out["truncated"] != false {
		t.Errorf("list_files = %v", out)
	}
	out = call(ctx, t, a, tool("list_files", args(map[string]any{"path": ".", "max_entries": 1})), false)
	if len(out["entries"].([]any)) != 1 || out["truncated"] != true || out["total_entries"].(float64) < 2 {
		t.Errorf("list_files max_entries=1 = %v", out)
	}
	for path, want := range map[string]bool{"notes.txt": true, "data/deep": true, "nope.txt": false} {
		out = call(ctx, t, a, tool("file_exists", args(map[string]any{"path": path})), false)
		if out["exists"] != want {
			t.Errorf("file_exists(%s) = %v", path, out)
		}
	}

	// Argument limits.
	for _, bad := range []map[string]any{
		{"command": "true", "timeout": 0}, {"command": "true", "timeout": 601},
	} {
		out = call(ctx, t, a, tool("execute_command", args(bad)), true)
		if !strings.Contains(out["error"].(string), "timeout must be greater than 0 and at most 600") {
			t.Errorf("execute_command %v: %v", bad, out)
		}
	}
	for _, n := range []int{0, 10001} {
		out = call(ctx, t, a, tool("list_files", args(map[string]any{"path": ".", "max_entries": n})), true)
		if !strings.Contains(out["error"].(string), "max_entries must be between 1 and 10000") {
			t.Errorf("list_files max_entries=%d: %v", n, out)
		}
	}
	out = call(ctx, t, a, tool("download_file", args(map[string]any{"path": "../../etc/passwd"})), true)
	if !strings.Contains(out["error"].(string), "leaves the sandbox workspace") {
		t.Errorf("path escape: %v", out)
	}

	// The resource lists this session's claims, and only in session a.
	rr, err := a.ReadResource(ctx, &sdk.ReadResourceParams{URI: "sandboxes://" + st.namespace})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != `["`+claim+`"]` {
		t.Errorf("sandboxes:// in session a = %v, %v", rr, err)
	}
	rr, err = b.ReadResource(ctx, &sdk.ReadResourceParams{URI: "sandboxes://" + st.namespace})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != `[]` {
		t.Errorf("sandboxes:// in session b = %v, %v", rr, err)
	}

	// Session b is refused everything on a's sandbox, with the message a
	// missing claim gets, and a's sandbox survives b's delete.
	notFound := "Sandbox claim '" + claim + "' is not found in namespace '" + st.namespace + "'."
	missing := "Sandbox claim 'no-such-claim' is not found in namespace '" + st.namespace + "'."
	for _, p := range []*sdk.CallToolParams{
		tool("execute_command", args(map[string]any{"command": "echo stolen"})),
		tool("upload_file", args(map[string]any{"path": "x.txt", "content": "x"})),
		tool("download_file", args(map[string]any{"path": "notes.txt"})),
		tool("list_files", args(map[string]any{"path": "."})),
		tool("file_exists", args(map[string]any{"path": "notes.txt"})),
		tool("delete_sandbox", args(nil)),
	} {
		out = call(ctx, t, b, p, true)
		if out["error"] != notFound {
			t.Errorf("session b %s: %v, want %q", p.Name, out["error"], notFound)
		}
	}
	out = call(ctx, t, b, tool("file_exists", map[string]any{"sandbox_claim_name": "no-such-claim", "path": "x"}), true)
	if out["error"] != missing {
		t.Errorf("missing claim: %v", out)
	}
	// A claim created outside MCP is no session's either.
	foreign := "mcp-foreign" + st.suffix
	ok(t, st, "create", "--pool", st.pool, "--name", foreign)
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", foreign) })
	out = call(ctx, t, a, tool("file_exists", map[string]any{"sandbox_claim_name": foreign, "path": "x"}), true)
	if !strings.Contains(out["error"].(string), "'"+foreign+"' is not found") {
		t.Errorf("foreign claim: %v", out)
	}
	out = call(ctx, t, a, tool("file_exists", args(map[string]any{"path": "notes.txt"})), false)
	if out["exists"] != true {
		t.Errorf("a's sandbox after b's attempts: %v", out)
	}

	// delete_sandbox by its session.
	out = call(ctx, t, a, tool("delete_sandbox", args(nil)), false)
	if out["deleted"] != true {
		t.Errorf("delete_sandbox = %v", out)
	}
	out = call(ctx, t, a, tool("execute_command", args(map[string]any{"command": "true"})), true)
	if out["error"] != notFound {
		t.Errorf("after delete: %v", out)
	}
	// create_sandbox argument checks.
	out = call(ctx, t, a, tool("create_sandbox", map[string]any{"warmpool": st.pool, "labels": map[string]any{"mcp.k8s-agent-sandbox/session-id": "forged"}}), true)
	if !strings.Contains(out["error"].(string), "must not set mcp.k8s-agent-sandbox/session-id") {
		t.Errorf("forged session label: %v", out)
	}
	out = call(ctx, t, a, tool("create_sandbox", map[string]any{"warmpool": "no-such-pool", "sandbox_ready_timeout": 5}), true)
	if !strings.Contains(out["error"].(string), "WarmPoolNotFound") && !strings.Contains(out["error"].(string), "not ready within") {
		t.Errorf("missing pool: %v", out)
	}
}

// TestMCPHTTP serves streamable HTTP: two HTTP sessions are isolated like
// stdio ones.
func TestMCPHTTP(t *testing.T) { runMCPHTTP(t, devstackTarget(t)) }

// TestMCPHTTPCluster is TestMCPHTTP on a real cluster, when
// AGENT_SANDBOX_CLI_E2E_KUBECONFIG is set.
func TestMCPHTTPCluster(t *testing.T) { runMCPHTTP(t, clusterTarget(t)) }

func runMCPHTTP(t *testing.T, st *target) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mcpTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "mcp", "--transport", "http", "--listen", "127.0.0.1:0")
	cmd.Env = cliEnv(st)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(interruptSignal)
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stderr)
	var url string
	re := regexp.MustCompile(`at (http://\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	if url == "" {
		t.Fatalf("no listen address from mcp --transport http: %v", sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()

	connect := func() *sdk.ClientSession {
		c := sdk.NewClient(&sdk.Implementation{Name: "http-test", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url}, nil)
		if err != nil {
			t.Fatalf("connecting to %s: %v", url, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	a, b := connect(), connect()
	if a.ID() == "" || a.ID() == b.ID() {
		t.Fatalf("HTTP sessions %q and %q", a.ID(), b.ID())
	}
	out := call(ctx, t, a, tool("create_sandbox", map[string]any{"warmpool": st.pool}), false)
	claim := out["sandbox_claim_name"].(string)
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", claim) })
	out = call(ctx, t, a, tool("execute_command", map[string]any{"sandbox_claim_name": claim, "command": "echo over http"}), false)
	if out["stdout"] != "over http\n" {
		t.Errorf("execute_command over HTTP = %v", out)
	}
	out = call(ctx, t, b, tool("execute_command", map[string]any{"sandbox_claim_name": claim, "command": "echo stolen"}), true)
	if !strings.Contains(out["error"].(string), "is not found in namespace") {
		t.Errorf("session b over HTTP: %v", out)
	}
	call(ctx, t, a, tool("delete_sandbox", map[string]any{"sandbox_claim_name": claim}), false)
}

package legacy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/internal/sandboxdtest"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

type env struct {
	t    *testing.T
	url  string
	base string // host path of the base directory
	out  string // host directory next to it
}

func newEnv(t *testing.T, mod ...func(*Config)) *env {
	t.Helper()
	tmp := t.TempDir()
	out := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := workspace.Open(filepath.Join(tmp, "app"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	cfg := Config{Root: root, DrainGrace: time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	hs := httptest.NewServer(New(cfg))
	t.Cleanup(hs.Close)
	return &env{t: t, url: hs.URL, base: root.Dir(), out: out}
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (e *env) do(method, path string, body io.Reader, contentType string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{r.StatusCode, r.Header, string(b)}
}

func (e *env) expect(r resp, status int, body string) {
	e.t.Helper()
	if r.status != status || r.body != body {
		e.t.Fatalf("got %d %s, want %d %s", r.status, r.body, status, body)
	}
	if r.status != 200 || strings.HasPrefix(body, "{") || strings.HasPrefix(body, "[") {
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			e.t.Fatalf("Content-Type = %q", ct)
		}
	}
}

type execResult struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  int    `json:"exit_code"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timed_out"`
}

func (e *env) execute(command string) (execResult, string) {
	e.t.Helper()
	return e.executeJSON(map[string]any{"command": command})
}

func (e *env) executeJSON(req map[string]any) (execResult, string) {
	e.t.Helper()
	body, _ := json.Marshal(req)
	r := e.do("POST", "/execute", bytes.NewReader(body), "application/json")
	if r.status != 200 {
		e.t.Fatalf("execute %s: %d %s", body, r.status, r.body)
	}
	var res execResult
	if err := json.Unmarshal([]byte(r.body), &res); err != nil {
		e.t.Fatal(err)
	}
	return res, r.body
}

func TestRoot(t *testing.T) {
	e := newEnv(t)
	e.expect(e.do("GET", "/", nil, ""), 200, `{"status":"ok","message":"Sandbox Runtime is active."}`)
	if r := e.do("HEAD", "/", nil, ""); r.status != 200 || r.body != "" {
		t.Fatalf("HEAD / = %d %q", r.status, r.body)
	}
	e.expect(e.do("GET", "/nope", nil, ""), 404, `{"detail":"Not Found"}`)
	e.expect(e.do("POST", "/", nil, ""), 405, `{"detail":"Method Not Allowed"}`)
	e.expect(e.do("GET", "/execute", nil, ""), 405, `{"detail":"Method Not Allowed"}`)
}

func TestExecute(t *testing.T) {
	e := newEnv(t)
	res, raw := e.execute("echo hello")
	if raw != `{"stdout":"hello\n","stderr":"","exit_code":0}` {
		t.Fatalf("raw = %s", raw)
	}
	// argv, not a shell: metacharacters are plain words.
	if res, _ = e.execute("echo $HOME | wc -l && x"); res.Stdout != "$HOME | wc -l && x\n" {
		t.Errorf("no-shell echo = %q", res.Stdout)
	}
	if res, _ = e.execute(`sh -c 'echo out; echo err >&2; exit 3'`); res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
		t.Errorf("sh -c = %+v", res)
	}
	// cwd is the base directory.
	if res, _ = e.execute("pwd"); res.Stdout != e.base+"\n" {
		t.Errorf("pwd = %q, want %q", res.Stdout, e.base)
	}
	// New session: the command is its own session leader.
	if res, _ = e.execute(`sh -c 'echo $$; cut -d" " -f6 /proc/$$/stat'`); len(strings.Fields(res.Stdout)) != 2 ||
		strings.Fields(res.Stdout)[0] != strings.Fields(res.Stdout)[1] {
		t.Errorf("pid and session = %q", res.Stdout)
	}
	// Universal newlines like Python's text mode; HTML not escaped.
	if _, raw = e.execute(`printf 'a\r\nb\rc<&>'`); raw != `{"stdout":"a\nb\nc<&>","stderr":"","exit_code":0}` {
		t.Errorf("text mode = %s", raw)
	}
	// Death by signal N is exit code -N, like subprocess.
	if res, _ = e.execute(`sh -c 'kill -9 $$'`); res.ExitCode != -9 {
		t.Errorf("killed = %+v", res)
	}
}

func TestExecuteFailures(t *testing.T) {
	e := newEnv(t)
	for cmd, stderr := range map[string]string{
		`echo 'unterminated`:   "Failed to execute command: No closing quotation",
		`echo \`:               "Failed to execute command: No escaped character",
		"no-such-binary-xyz a": "Failed to execute command: [Errno 2] No such file or directory: 'no-such-binary-xyz'",
		"./missing.sh":         "Failed to execute command: [Errno 2] No such file or directory: './missing.sh'",
		"   ":                  "Failed to execute command: list index out of range",
	} {
		_, raw := e.execute(cmd)
		want, _ := json.Marshal(execResult{Stderr: stderr, ExitCode: 1})
		want = bytes.Replace(want, []byte(`,"truncated":false,"timed_out":false`), nil, 1)
		if raw != string(want) {
			t.Errorf("execute(%q) = %s, want %s", cmd, raw, want)
		}
	}
	e.expect(e.do("POST", "/execute", strings.NewReader(`{}`), "application/json"), 422,
		`{"detail":[{"type":"missing","loc":["body","command"],"msg":"Field required","input":{}}]}`)
	if r := e.do("POST", "/execute", strings.NewReader(`{"command": 5}`), "application/json"); r.status != 422 {
		t.Errorf("non-string command = %d", r.status)
	}
	if r := e.do("POST", "/execute", strings.NewReader(`not json`), "application/json"); r.status != 422 {
		t.Errorf("invalid JSON = %d", r.status)
	}
}

func TestExecuteTimeoutKillsGroup(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ExecTimeout = ExecTimeout{D: 300 * time.Millisecond, Text: "0.3"} })
	pidFile := filepath.Join(e.base, "pid")
	start := time.Now()
	res, _ := e.execute(`sh -c 'sleep 300 & echo $! > pid; wait'`)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	want := "Failed to execute command: Command '['sh', '-c', 'sleep 300 & echo $! > pid; wait']' timed out after 0.3 seconds"
	if res.ExitCode != 1 || res.Stdout != "" || res.Stderr != want || !res.TimedOut {
		t.Fatalf("res = %+v", res)
	}
	sandboxdtest.WaitGone(t, sandboxdtest.ReadPid(t, pidFile))
}

// TestExecuteTimeoutSeconds: the per-request limit the published SDK sends
// (k8s-agent-sandbox 1.0.8 run(command_timeout=...)) ends the command and
// its whole process group, and the answer says timed_out. The server's own
// limit is 60 s here, so ignoring the field makes the test fail by the
// bound below.
func TestExecuteTimeoutSeconds(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ExecTimeout = ExecTimeout{D: time.Minute, Text: "60.0"} })
	start := time.Now()
	res, raw := e.executeJSON(map[string]any{
		"command":         `sh -c 'sleep 30 & echo $! > child.pid; echo $$ > leader.pid; echo partial; wait'`,
		"timeout_seconds": 1,
	})
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("returned after %v", took)
	}
	want := "Failed to execute command: Command '['sh', '-c', 'sleep 30 & echo $! > child.pid; echo $$ > leader.pid; echo partial; wait']' timed out after 1.0 seconds"
	if !res.TimedOut || res.ExitCode != 1 || res.Stdout != "" || res.Stderr != want {
		t.Fatalf("res = %s", raw)
	}
	// The sleep is in the leader's process group, so both are gone.
	sandboxdtest.WaitGone(t, sandboxdtest.ReadPid(t, filepath.Join(e.base, "child.pid")))
	sandboxdtest.WaitGone(t, sandboxdtest.ReadPid(t, filepath.Join(e.base, "leader.pid")))

	// Fractions, and a command that ends in time: no timed_out at all,
	// so the answer stays byte-identical to the python runtime's.
	if _, raw := e.executeJSON(map[string]any{"command": "echo fast", "timeout_seconds": 30.5}); raw != `{"stdout":"fast\n","stderr":"","exit_code":0}` {
		t.Errorf("in-time answer = %s", raw)
	}
	if _, raw := e.executeJSON(map[string]any{"command": "echo fast", "timeout_seconds": nil}); raw != `{"stdout":"fast\n","stderr":"","exit_code":0}` {
		t.Errorf("null timeout answer = %s", raw)
	}
	if res, _ := e.executeJSON(map[string]any{"command": "sleep 30", "timeout_seconds": 0.25}); !res.TimedOut ||
		!strings.HasSuffix(res.Stderr, "timed out after 0.25 seconds") {
		t.Errorf("fractional timeout = %+v", res)
	}
}

// The server's limit is a ceiling: asking for more time than
// SANDBOX_EXEC_TIMEOUT_SECONDS gets the server's limit.
func TestExecuteTimeoutSecondsCappedByServer(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ExecTimeout = ExecTimeout{D: 300 * time.Millisecond, Text: "0.3"} })
	res, raw := e.executeJSON(map[string]any{"command": "sleep 30", "timeout_seconds": 3600})
	if !res.TimedOut || !strings.HasSuffix(res.Stderr, "timed out after 0.3 seconds") {
		t.Fatalf("res = %s", raw)
	}
}

func TestExecuteTimeoutSecondsValidation(t *testing.T) {
	e := newEnv(t)
	for body, want := range map[string]string{
		`{"command":"touch made","timeout_seconds":0}`:     `{"detail":[{"type":"greater_than","loc":["body","timeout_seconds"],"msg":"Input should be greater than 0","input":0}]}`,
		`{"command":"touch made","timeout_seconds":-1.5}`:  `{"detail":[{"type":"greater_than","loc":["body","timeout_seconds"],"msg":"Input should be greater than 0","input":-1.5}]}`,
		`{"command":"touch made","timeout_seconds":"5"}`:   `{"detail":[{"type":"float_type","loc":["body","timeout_seconds"],"msg":"Input should be a valid number","input":"5"}]}`,
		`{"command":"touch made","timeout_seconds":true}`:  `{"detail":[{"type":"float_type","loc":["body","timeout_seconds"],"msg":"Input should be a valid number","input":true}]}`,
		`{"command":"touch made","timeout_seconds":1e999}`: `{"detail":[{"type":"float_type","loc":["body","timeout_seconds"],"msg":"Input should be a valid number","input":1e999}]}`,
	} {
		e.expect(e.do("POST", "/execute", strings.NewReader(body), "application/json"), 422, want)
	}
	if _, err := os.Stat(filepath.Join(e.base, "made")); err == nil {
		t.Fatal("a refused request ran its command")
	}
}

func TestExecuteClientDisconnectKillsGroup(t *testing.T) {
	e := newEnv(t)
	pidFile := filepath.Join(e.base, "pid")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/execute",
			strings.NewReader(`{"command":"sh -c 'sleep 300 & echo $! > pid; wait'"}`))
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}()
	pid := sandboxdtest.ReadPid(t, pidFile)
	cancel()
	<-done
	sandboxdtest.WaitGone(t, pid)
}

func TestExecuteOutputCap(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxOutput = 10 })
	res, _ := e.execute("sh -c 'seq 1 1000'")
	if res.Stdout != "1\n2\n3\n4\n5\n" || !res.Truncated || res.ExitCode != 0 {
		t.Fatalf("res = %+v", res)
	}
	if _, raw := e.execute("echo short"); strings.Contains(raw, "truncated") {
		t.Fatalf("untruncated response mentions truncation: %s", raw)
	}
}

func TestExecuteConcurrent(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			body := fmt.Sprintf(`{"command":"sh -c 'sleep 0.1; echo %d; exit %d'"}`, i, i%7)
			r, err := http.Post(e.url+"/execute", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer r.Body.Close()
			var res execResult
			if err := json.NewDecoder(r.Body).Decode(&res); err != nil || res.Stdout != fmt.Sprintf("%d\n", i) || res.ExitCode != i%7 {
				t.Errorf("run %d: %+v %v", i, res, err)
			}
		})
	}
	wg.Wait()
}

func TestParseExecTimeout(t *testing.T) {
	for in, want := range map[string]ExecTimeout{
		"":     {DefaultExecTimeout, "300"},
		"  ":   {DefaultExecTimeout, "300"},
		"10":   {10 * time.Second, "10.0"},
		"2.5":  {2500 * time.Millisecond, "2.5"},
		"0":    {DefaultExecTimeout, "300"},
		"-1":   {DefaultExecTimeout, "300"},
		"abc":  {DefaultExecTimeout, "300"},
		"inf":  {DefaultExecTimeout, "300"},
		"nan":  {DefaultExecTimeout, "300"},
		"1e30": {DefaultExecTimeout, "300"},
	} {
		got, warn := ParseExecTimeout(in)
		if got != want {
			t.Errorf("ParseExecTimeout(%q) = %+v, want %+v", in, got, want)
		}
		if (warn != nil) != (strings.TrimSpace(in) != "" && got.D == DefaultExecTimeout) {
			t.Errorf("ParseExecTimeout(%q) warning = %v", in, warn)
		}
	}
}

func uploadBody(t *testing.T, filename, content string) (io.Reader, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	h := make(map[string][]string)
	h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name="file"; filename="%s"`, filename)}
	h["Content-Type"] = []string{"application/octet-stream"}
	w, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte(content))
	_ = mw.Close()
	return &b, mw.FormDataContentType()
}

func TestUpload(t *testing.T) {
	e := newEnv(t)
	body, ct := uploadBody(t, "data.txt", "payload")
	e.expect(e.do("POST", "/upload", body, ct), 200, `{"message":"File 'data.txt' uploaded successfully."}`)
	if b, _ := os.ReadFile(filepath.Join(e.base, "data.txt")); string(b) != "payload" {
		t.Fatalf("content = %q", b)
	}
	body, ct = uploadBody(t, "sub/dir/nested.txt", "nested")
	e.expect(e.do("POST", "/upload", body, ct), 200, `{"message":"File 'sub/dir/nested.txt' uploaded successfully."}`)
	if b, _ := os.ReadFile(filepath.Join(e.base, "sub", "dir", "nested.txt")); string(b) != "nested" {
		t.Fatalf("nested content = %q", b)
	}
	body, ct = uploadBody(t, "/abs/leading.txt", "x")
	e.expect(e.do("POST", "/upload", body, ct), 200, `{"message":"File '/abs/leading.txt' uploaded successfully."}`)
	if _, err := os.Stat(filepath.Join(e.base, "abs", "leading.txt")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../outside/secret", "../../etc/passwd", "a/../../x"} {
		body, ct = uploadBody(t, bad, "pwned")
		e.expect(e.do("POST", "/upload", body, ct), 403, `{"message":"Access denied"}`)
	}
	if err := os.Symlink(e.out, filepath.Join(e.base, "esc")); err != nil {
		t.Fatal(err)
	}
	body, ct = uploadBody(t, "esc/secret", "pwned")
	e.expect(e.do("POST", "/upload", body, ct), 403, `{"message":"Access denied"}`)
	if b, _ := os.ReadFile(filepath.Join(e.out, "secret")); string(b) != "secret" {
		t.Fatalf("outside file changed: %q", b)
	}
	// Missing file part: FastAPI's 422.
	e.expect(e.do("POST", "/upload", strings.NewReader("x"), "text/plain"), 422,
		`{"detail":[{"type":"missing","loc":["body","file"],"msg":"Field required","input":null}]}`)
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	_ = mw.WriteField("file", "not a file")
	_ = mw.Close()
	if r := e.do("POST", "/upload", &b, mw.FormDataContentType()); r.status != 422 {
		t.Fatalf("text field named file = %d %s", r.status, r.body)
	}
	// Writing over a directory fails like open(dir, "wb") does.
	body, ct = uploadBody(t, "sub", "x")
	if r := e.do("POST", "/upload", body, ct); r.status != 500 || !strings.HasPrefix(r.body, `{"message":"File upload failed: `) {
		t.Fatalf("upload over a directory = %d %s", r.status, r.body)
	}
}

func TestDownload(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(filepath.Join(e.base, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.base, "d", "my file.bin"), []byte("bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/download/d/my%20file.bin", nil, "")
	if r.status != 200 || r.body != "bytes" || r.header.Get("Content-Type") != "application/octet-stream" ||
		r.header.Get("Content-Disposition") != `attachment; filename*=utf-8''my%20file.bin` {
		t.Fatalf("download = %d %q %v", r.status, r.body, r.header)
	}
	// Path parameters are decoded twice, like the python runtime.
	if r := e.do("GET", "/download/d%252Fmy%2520file.bin", nil, ""); r.status != 200 || r.body != "bytes" {
		t.Fatalf("double-decoded download = %d %q", r.status, r.body)
	}
	if err := os.WriteFile(filepath.Join(e.base, "plain.txt"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/download/plain.txt", nil, ""); r.header.Get("Content-Disposition") != `attachment; filename="plain.txt"` {
		t.Fatalf("Content-Disposition = %q", r.header.Get("Content-Disposition"))
	}
	e.expect(e.do("GET", "/download/missing.txt", nil, ""), 404, `{"message":"File not found"}`)
	e.expect(e.do("GET", "/download/d", nil, ""), 404, `{"message":"File not found"}`)
	e.expect(e.do("GET", "/download/", nil, ""), 404, `{"message":"File not found"}`)
	for _, p := range []string{"/download/../outside/secret", "/download/%2E%2E/outside/secret", "/download/%252E%252E/outside/secret", "/download/d/../../outside/secret"} {
		e.expect(e.do("GET", p, nil, ""), 403, `{"message":"Access denied"}`)
	}
	if err := os.Symlink(filepath.Join(e.out, "secret"), filepath.Join(e.base, "leak")); err != nil {
		t.Fatal(err)
	}
	e.expect(e.do("GET", "/download/leak", nil, ""), 403, `{"message":"Access denied"}`)
	if r := e.do("GET", "/download/a%2500b", nil, ""); r.status != 400 {
		t.Fatalf("NUL path = %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/download", nil, ""); r.status != http.StatusTemporaryRedirect || r.header.Get("Location") != "/download/" {
		t.Fatalf("/download without slash = %d %v", r.status, r.header)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t)
	if err := os.MkdirAll(filepath.Join(e.base, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.base, "d", "f.txt"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1700000000, 0)
	if err := os.Chtimes(filepath.Join(e.base, "d", "f.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f.txt", filepath.Join(e.base, "d", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.out, filepath.Join(e.base, "d", "escape")); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/list/d", nil, "")
	if r.status != 200 || !strings.HasPrefix(r.body, "[") {
		t.Fatalf("list = %d %s", r.status, r.body)
	}
	if !strings.Contains(r.body, `{"name":"f.txt","size":5,"type":"file","mod_time":1700000000.0}`) {
		t.Errorf("file entry missing or misformatted: %s", r.body)
	}
	var ents []struct {
		Name    string  `json:"name"`
		Size    int64   `json:"size"`
		Type    string  `json:"type"`
		ModTime float64 `json:"mod_time"`
	}
	if err := json.Unmarshal([]byte(r.body), &ents); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, en := range ents {
		got[en.Name] = en.Type + "/" + strconv.FormatInt(en.Size, 10)
	}
	if len(got) != 3 || got["sub"][:9] != "directory" || got["f.txt"] != "file/5" || got["link"] != "file/5" {
		t.Errorf("entries = %v (symlinks followed, escaping ones omitted)", got)
	}
	if r := e.do("GET", "/list/", nil, ""); r.status != 200 || !strings.Contains(r.body, `"name":"d"`) {
		t.Errorf("list base = %d %s", r.status, r.body)
	}
	if err := os.Mkdir(filepath.Join(e.base, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.expect(e.do("GET", "/list/empty", nil, ""), 200, `[]`)
	e.expect(e.do("GET", "/list/d/f.txt", nil, ""), 404, `{"message":"Path is not a directory"}`)
	e.expect(e.do("GET", "/list/missing", nil, ""), 404, `{"message":"Path is not a directory"}`)
	e.expect(e.do("GET", "/list/..", nil, ""), 403, `{"message":"Access denied"}`)
	e.expect(e.do("GET", "/list/d/escape", nil, ""), 403, `{"message":"Access denied"}`)
}

func TestExists(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(filepath.Join(e.base, "here.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(e.base, "broken")); err != nil {
		t.Fatal(err)
	}
	e.expect(e.do("GET", "/exists/here.txt", nil, ""), 200, `{"path":"here.txt","exists":true}`)
	e.expect(e.do("GET", "/exists//here.txt", nil, ""), 200, `{"path":"/here.txt","exists":true}`)
	e.expect(e.do("GET", "/exists/nope.txt", nil, ""), 200, `{"path":"nope.txt","exists":false}`)
	e.expect(e.do("GET", "/exists/broken", nil, ""), 200, `{"path":"broken","exists":false}`)
	e.expect(e.do("GET", "/exists/a%2520b", nil, ""), 200, `{"path":"a b","exists":false}`)
	e.expect(e.do("GET", "/exists/../outside/secret", nil, ""), 403, `{"message":"Access denied"}`)
	e.expect(e.do("GET", "/exists/%252E%252E%252Foutside", nil, ""), 403, `{"message":"Access denied"}`)
}

func TestParseDisposition(t *testing.T) {
	for _, tc := range []struct {
		h, name, filename string
		has               bool
	}{
		{`form-data; name="file"; filename="a.txt"`, "file", "a.txt", true},
		{`form-data; name=file; filename=dir/a.txt`, "file", "dir/a.txt", true},
		{`form-data; name="file"; filename="semi;colon \"q\".txt"`, "file", `semi;colon "q".txt`, true},
		{`form-data; name="file"; filename*=UTF-8''%C3%A9t%C3%A9.txt; filename="fallback"`, "file", "été.txt", true},
		{`form-data; name="file"; filename="C:\Users\me\doc.txt"`, "file", "doc.txt", true},
		{`form-data; name="file"; filename=""`, "file", "", true},
		{`form-data; name="file"`, "file", "", false},
		{`attachment; name="file"; filename="a"`, "", "", false},
		{`FORM-DATA; NAME="file"; FILENAME="x"`, "file", "x", true},
		{``, "", "", false},
	} {
		name, filename, has := parseDisposition(tc.h)
		if name != tc.name || filename != tc.filename || has != tc.has {
			t.Errorf("parseDisposition(%q) = %q %q %v, want %q %q %v", tc.h, name, filename, has, tc.name, tc.filename, tc.has)
		}
	}
}

func TestUnquoteAndQuote(t *testing.T) {
	for in, want := range map[string]string{"a%20b": "a b", "%2e%2E": "..", "100%": "100%", "%zz": "%zz", "a+b": "a+b", "%2": "%2"} {
		if got := unquote(in); got != want {
			t.Errorf("unquote(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"a b": "a%20b", "x/y": "x/y", "é": "%C3%A9", "a_b.c-d~": "a_b.c-d~", "a$b": "a%24b"} {
		if got := pyQuote(in); got != want {
			t.Errorf("pyQuote(%q) = %q, want %q", in, got, want)
		}
	}
	if got := pyList([]string{"a", "it's", `q"'`}); got != `['a', "it's", 'q"\'']` {
		t.Errorf("pyList = %s", got)
	}
}

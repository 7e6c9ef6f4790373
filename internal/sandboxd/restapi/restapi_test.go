package restapi

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

type env struct {
	t    *testing.T
	srv  *Server
	url  string
	root string // host path of the workspace
	out  string // host directory next to the workspace
}

func newEnv(t *testing.T) *env {
	t.Helper()
	tmp := t.TempDir()
	root := filepath.Join(tmp, "workspace")
	out := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	srv := New(Config{Root: ws, Environ: []string{"SANDBOX_NAME=box", "SANDBOX_API_TOKEN=x"}})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &env{t: t, srv: srv, url: hs.URL, root: ws.Dir(), out: out}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path string, body io.Reader, header ...string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	// Never follow the mux's redirects: they are part of what is tested.
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
	return resp{r.StatusCode, r.Header, b}
}

func (e *env) expectError(r resp, status int, code string) {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("Content-Type = %q", ct)
	}
	var ae apiError
	if err := json.Unmarshal(r.body, &ae); err != nil || ae.Code != code || ae.Message == "" {
		e.t.Fatalf("body %s, want code %s", r.body, code)
	}
}

func (e *env) put(path, content string) {
	e.t.Helper()
	if r := e.do("PUT", path, strings.NewReader(content)); r.status != http.StatusNoContent {
		e.t.Fatalf("PUT %s: %d %s", path, r.status, r.body)
	}
}

func TestPutGetRoundTrip(t *testing.T) {
	e := newEnv(t)
	e.put("/v1/files/a/b/c.txt", "hello world")
	r := e.do("GET", "/v1/files/a/b/c.txt", nil)
	if r.status != 200 || string(r.body) != "hello world" {
		t.Fatalf("GET = %d %q", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	if r.header.Get("Content-Length") != "11" || r.header.Get("Last-Modified") == "" {
		t.Errorf("headers = %v", r.header)
	}
	// Parents were created 0755, the file 0644 by default.
	if fi, _ := os.Stat(filepath.Join(e.root, "a", "b")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("parent mode = %v", fi)
	}
	if fi, _ := os.Stat(filepath.Join(e.root, "a", "b", "c.txt")); fi == nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("file mode = %v", fi)
	}
	// Range requests are served.
	r = e.do("GET", "/v1/files/a/b/c.txt", nil, "Range", "bytes=6-")
	if r.status != http.StatusPartialContent || string(r.body) != "world" {
		t.Errorf("range GET = %d %q", r.status, r.body)
	}
}

func TestPutMode(t *testing.T) {
	e := newEnv(t)
	if r := e.do("PUT", "/v1/files/run.sh?mode=0755", strings.NewReader("#!/bin/sh\n")); r.status != 204 {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	if fi, _ := os.Stat(filepath.Join(e.root, "run.sh")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v", fi)
	}
	for _, bad := range []string{"755", "0o755", "0888", "07555", "", "abc"} {
		e.expectError(e.do("PUT", "/v1/files/x?mode="+bad, strings.NewReader("x")), 400, CodeInvalidArgument)
	}
	if _, err := os.Stat(filepath.Join(e.root, "x")); err == nil {
		t.Error("file written despite an invalid mode")
	}
}

func TestPutOverwriteIsAtomic(t *testing.T) {
	e := newEnv(t)
	old := strings.Repeat("o", 1<<20)
	e.put("/v1/files/f", old)
	// Readers racing a rewrite see the old or the new content, never a
	// mix or a partial file.
	stop := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		newContent := strings.Repeat("n", 1<<20)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(filepath.Join(e.root, "f"))
			if err == nil && string(b) != old && string(b) != newContent {
				select {
				case bad <- "torn read":
				default:
				}
			}
		}
	}()
	for range 20 {
		e.put("/v1/files/f", strings.Repeat("n", 1<<20))
		e.put("/v1/files/f", old)
	}
	close(stop)
	select {
	case msg := <-bad:
		t.Fatal(msg)
	default:
	}
	ents, _ := os.ReadDir(e.root)
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), workspace.TempPrefix) {
			t.Errorf("temporary file left behind: %s", en.Name())
		}
	}
}

func multipartBody(t *testing.T, field, content string) (io.Reader, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if err := mw.WriteField("other", "ignored"); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreateFormFile(field, "ignored-name.txt")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write([]byte(content))
	_ = mw.Close()
	return &b, mw.FormDataContentType()
}

func TestPutMultipart(t *testing.T) {
	e := newEnv(t)
	body, ct := multipartBody(t, "file", "from form")
	if r := e.do("PUT", "/v1/files/up.txt", body, "Content-Type", ct); r.status != 204 {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	if b, _ := os.ReadFile(filepath.Join(e.root, "up.txt")); string(b) != "from form" {
		t.Fatalf("content = %q", b)
	}
	body, ct = multipartBody(t, "upload", "x")
	e.expectError(e.do("PUT", "/v1/files/none.txt", body, "Content-Type", ct), 400, CodeInvalidArgument)
	if _, err := os.Stat(filepath.Join(e.root, "none.txt")); err == nil {
		t.Error("file written without a file part")
	}
}

func TestPutToDirectory(t *testing.T) {
	e := newEnv(t)
	e.put("/v1/files/d/f", "x")
	e.expectError(e.do("PUT", "/v1/files/d", strings.NewReader("x")), 400, CodeInvalidArgument)
	e.expectError(e.do("PUT", "/v1/files/", strings.NewReader("x")), 400, CodeInvalidArgument)
}

func TestPutEncodedSlashCreatesNestedFile(t *testing.T) {
	e := newEnv(t)
	e.put("/v1/files/x%2Fy%2Fz.txt", "nested")
	if b, _ := os.ReadFile(filepath.Join(e.root, "x", "y", "z.txt")); string(b) != "nested" {
		t.Fatalf("content = %q", b)
	}
}

func TestGetDirectoryListing(t *testing.T) {
	e := newEnv(t)
	e.put("/v1/files/dir/b.txt?mode=0600", "bb")
	e.put("/v1/files/dir/a.txt", "a")
	e.put("/v1/files/dir/sub/c", "c")
	if err := os.Symlink(e.out, filepath.Join(e.root, "dir", "zz-escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(e.root, "dir", "link")); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/v1/files/dir", nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET dir = %d %v", r.status, r.header)
	}
	var l DirectoryListing
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Path != "/dir" {
		t.Errorf("path = %q", l.Path)
	}
	var names []string
	for _, en := range l.Entries {
		names = append(names, en.Name)
	}
	if strings.Join(names, ",") != "a.txt,b.txt,link,sub" {
		t.Fatalf("entries = %v (escaping symlink must be omitted, order sorted)", names)
	}
	rfc3339 := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	for _, en := range l.Entries {
		if !rfc3339.MatchString(en.ModifiedAt) {
			t.Errorf("%s modified_at = %q", en.Name, en.ModifiedAt)
		}
		if _, err := time.Parse(time.RFC3339, en.ModifiedAt); err != nil {
			t.Error(err)
		}
	}
	b, sub, link := l.Entries[1], l.Entries[3], l.Entries[2]
	if b.Type != "file" || b.Size != 2 || b.Mode != "0600" {
		t.Errorf("b.txt = %+v", b)
	}
	if sub.Type != "directory" || sub.Mode != "0755" {
		t.Errorf("sub = %+v", sub)
	}
	if link.Type != "file" || link.Size != 1 {
		t.Errorf("symlink entry should describe its target: %+v", link)
	}

	// The root lists too, and an empty directory has "entries": [].
	if err := os.Mkdir(filepath.Join(e.root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", "/v1/files/empty", nil)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"entries":[]`)) {
		t.Fatalf("empty dir = %d %s", r.status, r.body)
	}
	r = e.do("GET", "/v1/files/", nil)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"path":"/"`)) {
		t.Fatalf("root = %d %s", r.status, r.body)
	}
}

func TestGetMissingAndHead(t *testing.T) {
	e := newEnv(t)
	e.expectError(e.do("GET", "/v1/files/missing.txt", nil), 404, CodeNotFound)
	e.expectError(e.do("GET", "/v1/files/missing/deeper", nil), 404, CodeNotFound)
	e.put("/v1/files/f.txt", "12345")
	e.expectError(e.do("GET", "/v1/files/f.txt/below", nil), 404, CodeNotFound)
	r := e.do("HEAD", "/v1/files/f.txt", nil)
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "5" {
		t.Fatalf("HEAD = %d %q %v", r.status, r.body, r.header)
	}
	if r := e.do("HEAD", "/v1/files/missing.txt", nil); r.status != 404 || len(r.body) != 0 {
		t.Fatalf("HEAD missing = %d %q", r.status, r.body)
	}
	if r := e.do("HEAD", "/v1/files/", nil); r.status != 200 {
		t.Fatalf("HEAD dir = %d", r.status)
	}
}

func TestTraversalForbidden(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{
		"/v1/files/%2E%2E/%2E%2E/etc/passwd",
		"/v1/files/%2E%2E%2Foutside%2Fsecret",
		"/v1/files/a/%2E%2E/%2E%2E/outside/secret",
	} {
		e.expectError(e.do("GET", p, nil), 403, CodePermissionDenied)
		e.expectError(e.do("PUT", p, strings.NewReader("pwned")), 403, CodePermissionDenied)
		e.expectError(e.do("DELETE", p, nil), 403, CodePermissionDenied)
	}
	if err := os.Symlink(e.out, filepath.Join(e.root, "esc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(e.out, "secret"), filepath.Join(e.root, "esc-file")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/files/esc/secret", "/v1/files/esc-file", "/v1/files/esc/new", "/v1/files/esc/new/deeper"} {
		e.expectError(e.do("GET", p, nil), 403, CodePermissionDenied)
		e.expectError(e.do("PUT", p, strings.NewReader("pwned")), 403, CodePermissionDenied)
		e.expectError(e.do("DELETE", p+"?recursive=true", nil), 403, CodePermissionDenied)
	}
	if r := e.do("HEAD", "/v1/files/esc-file", nil); r.status != 403 || len(r.body) != 0 {
		t.Fatalf("HEAD through escaping symlink = %d %q", r.status, r.body)
	}
	if b, _ := os.ReadFile(filepath.Join(e.out, "secret")); string(b) != "secret" {
		t.Fatalf("outside file changed: %q", b)
	}
	if ents, _ := os.ReadDir(e.out); len(ents) != 1 {
		t.Fatalf("outside directory changed: %v", ents)
	}
	// A literal ".." is cleaned by the mux into a redirect, never served.
	if r := e.do("GET", "/v1/files/../../etc/passwd", nil); r.status/100 != 3 || r.header.Get("Location") != "/etc/passwd" {
		t.Fatalf("literal .. = %d %v", r.status, r.header)
	}
	// A NUL byte is not a path.
	e.expectError(e.do("GET", "/v1/files/a%00b", nil), 400, CodeInvalidArgument)
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	e.put("/v1/files/f.txt", "x")
	if r := e.do("DELETE", "/v1/files/f.txt", nil); r.status != 204 {
		t.Fatalf("DELETE = %d %s", r.status, r.body)
	}
	e.expectError(e.do("DELETE", "/v1/files/f.txt", nil), 404, CodeNotFound)
	e.expectError(e.do("GET", "/v1/files/f.txt", nil), 404, CodeNotFound)

	e.put("/v1/files/d/sub/f", "x")
	e.expectError(e.do("DELETE", "/v1/files/d", nil), 409, CodeConflict)
	e.expectError(e.do("DELETE", "/v1/files/d?recursive=banana", nil), 400, CodeInvalidArgument)
	if r := e.do("DELETE", "/v1/files/d?recursive=true", nil); r.status != 204 {
		t.Fatalf("recursive DELETE = %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(e.root, "d")); err == nil {
		t.Fatal("directory still there")
	}
	if err := os.Mkdir(filepath.Join(e.root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if r := e.do("DELETE", "/v1/files/empty?recursive=0", nil); r.status != 204 {
		t.Fatalf("DELETE empty dir = %d %s", r.status, r.body)
	}

	e.put("/v1/files/keep/a", "x")
	e.put("/v1/files/b", "x")
	e.expectError(e.do("DELETE", "/v1/files/", nil), 409, CodeConflict)
	if r := e.do("DELETE", "/v1/files/?recursive=T", nil); r.status != 204 {
		t.Fatalf("DELETE root = %d %s", r.status, r.body)
	}
	ents, err := os.ReadDir(e.root)
	if err != nil || len(ents) != 0 {
		t.Fatalf("root after recursive delete: %v %v (must exist and be empty)", ents, err)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/v1/health", nil)
	var h struct {
		Status        string `json:"status"`
		UptimeSeconds *int64 `json:"uptime_seconds"`
	}
	if err := json.Unmarshal(r.body, &h); err != nil || r.status != 200 || h.Status != "ok" || h.UptimeSeconds == nil || *h.UptimeSeconds < 0 {
		t.Fatalf("health = %d %s", r.status, r.body)
	}
	e.srv.SetReady(false)
	e.expectError(e.do("GET", "/v1/health", nil), 503, CodeUnavailable)
	e.srv.SetReady(true)
	if r := e.do("GET", "/v1/health", nil); r.status != 200 {
		t.Fatalf("health after ready = %d", r.status)
	}
}

func TestMetadata(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/v1/metadata", nil)
	if r.status != 200 || string(r.body) != `{"env":{"SANDBOX_NAME":"box"}}`+"\n" {
		t.Fatalf("metadata = %d %s", r.status, r.body)
	}
	got := FilterMetadata([]string{
		"SANDBOX_NAME=n", "SANDBOX_EMPTY=", "SANDBOX_EQ=a=b",
		"SANDBOX_API_TOKEN=t", "SANDBOX_secret_x=s", "SANDBOX_PASSWORD=p", "SANDBOX_DB_PASSWD=p",
		"SANDBOX_AWS_CREDENTIALS=c", "SANDBOX_SSH_KEY=k", "SANDBOX_AUTH_HEADER=a", "SANDBOX_BEARER=b",
		"SANDBOX_PRIVATE_THING=p", "SANDBOX_TLS_CERT=c", "SANDBOX_apikey=k",
		"OTHER_NAME=o", "sandbox_lower=l", "MALFORMED", "=novalue", "",
	}, "SANDBOX_")
	want := map[string]string{"SANDBOX_NAME": "n", "SANDBOX_EMPTY": "", "SANDBOX_EQ": "a=b"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestRoutingErrors(t *testing.T) {
	e := newEnv(t)
	if r := e.do("GET", "/nope", nil); r.status != 404 || strings.HasPrefix(string(r.body), "{") {
		t.Errorf("unknown path = %d %q (plain text expected)", r.status, r.body)
	}
	if r := e.do("POST", "/v1/files/x", strings.NewReader("x")); r.status != 405 {
		t.Errorf("POST files = %d", r.status)
	}
	if r := e.do("POST", "/v1/health", nil); r.status != 405 {
		t.Errorf("POST health = %d", r.status)
	}
}

package sandbox

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestEncodePath(t *testing.T) {
	for in, want := range map[string]string{
		"file.txt":       "file.txt",
		"a b":            "a%20b",
		"dir/file":       "dir%2Ffile",
		".":              "%2E",
		"..":             "%2E%2E",
		"../etc/passwd":  "..%2Fetc%2Fpasswd",
		"a@b!c":          "a%40b%21c",
		"~user/_x-y":     "~user%2F_x-y",
		"/abs":           "%2Fabs",
		"ünï":            "%C3%BCn%C3%AF",
		"q?x#y&z=1+2%":   "q%3Fx%23y%26z%3D1%2B2%25",
		"with/trailing/": "with%2Ftrailing%2F",
	} {
		if got := encodePath(in); got != want {
			t.Errorf("encodePath(%q) = %q, want %q", in, got, want)
		}
	}
}

// A Go ServeMux redirects literal dot segments; an encoded "." must reach
// the handler.
func TestListDotDoesNotRedirect(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /list/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("path") != "." {
			http.Error(w, "wrong path "+r.PathValue("path"), 400)
			return
		}
		writeJSON(w, 200, `[]`)
	})
	rec := &recorder{answer: func(_ int, w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) }}
	srv := newServer(t, rec)
	s := directSandbox(t, srv, nil)
	entries, err := s.List(testCtx(t), ".")
	if err != nil {
		t.Fatalf("List(.): %v", err)
	}
	if entries == nil || len(entries) != 0 {
		t.Errorf("entries = %#v, want empty non-nil", entries)
	}
	if r, _ := rec.req(0); r.URL.RawPath != "/list/%2E" && r.URL.EscapedPath() != "/list/%2E" {
		t.Errorf("path = %q", r.URL.EscapedPath())
	}
}

func TestLegacyWriteMultipart(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, `{"message":"File 'notes.txt' uploaded successfully."}`)
	})
	s := directSandbox(t, srv, nil)
	if err := s.Write(testCtx(t), "notes.txt", []byte("hello\x00world")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	r, body := rec.req(0)
	if r.Method != http.MethodPost || r.URL.Path != "/upload" {
		t.Fatalf("request = %s %s", r.Method, r.URL.Path)
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		t.Fatalf("content type %q: %v", r.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
	part, err := mr.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	if part.FormName() != "file" || part.FileName() != "notes.txt" {
		t.Errorf("part %q filename %q", part.FormName(), part.FileName())
	}
	got, _ := io.ReadAll(part)
	if string(got) != "hello\x00world" {
		t.Errorf("content %q", got)
	}
	if _, err := mr.NextPart(); !errors.Is(err, io.EOF) {
		t.Errorf("more than one part: %v", err)
	}
}

func TestLegacyWritePathRules(t *testing.T) {
	rec, srv := newRecorder(t, func(_ int, w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, `{}`) })
	s := directSandbox(t, srv, nil)
	for _, p := range []string{"", ".", "..", "dir/file", "dir/", "/abs", `a\b`} {
		if err := s.Write(testCtx(t), p, []byte("x")); err == nil {
			t.Errorf("Write(%q) accepted", p)
		}
	}
	if rec.count() != 0 {
		t.Errorf("%d requests sent for rejected paths", rec.count())
	}
	for _, op := range []func() error{
		func() error { _, err := s.Read(testCtx(t), ""); return err },
		func() error { _, err := s.List(testCtx(t), ""); return err },
		func() error { _, err := s.Exists(testCtx(t), ""); return err },
	} {
		if op() == nil {
			t.Error("empty path accepted")
		}
	}
	if err := s.Delete(testCtx(t), "f", false); !errors.Is(err, ErrUnsupportedByRuntime) {
		t.Errorf("legacy Delete = %v, want ErrUnsupportedByRuntime", err)
	}
}

func TestLegacyList(t *testing.T) {
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.EscapedPath() != "/list/sub%2Fdir" {
			http.Error(w, r.URL.EscapedPath(), 400)
			return
		}
		writeJSON(w, 200, `[
			{"name":"a.txt","size":5,"type":"file","mod_time":1700000000.25},
			{"name":"d","size":4096,"type":"directory","mod_time":1700000001},
			{"name":"sock","size":0,"type":"socket","mod_time":1}
		]`)
	})
	s := directSandbox(t, srv, nil)
	entries, err := s.List(testCtx(t), "sub/dir")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("entries = %+v, want the socket filtered out", entries)
	}
	if e := entries[0]; e.Name != "a.txt" || e.Size != 5 || e.Type != FileTypeFile ||
		!e.ModTime.Equal(time.Unix(1700000000, 250000000)) {
		t.Errorf("entry 0 = %+v", e)
	}
	if entries[1].Type != FileTypeDirectory {
		t.Errorf("entry 1 = %+v", entries[1])
	}
}

func TestMalformedResponses(t *testing.T) {
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/list/"):
			writeJSON(w, 200, `{"not":"an array"}`)
		case strings.HasPrefix(r.URL.Path, "/exists/"):
			writeJSON(w, 200, `{"path":"x"}`)
		case r.URL.Path == "/execute":
			writeJSON(w, 200, `{}`)
		}
	})
	s := directSandbox(t, srv, nil)
	if _, err := s.List(testCtx(t), "x"); err == nil {
		t.Error("List accepted an object")
	}
	if _, err := s.Exists(testCtx(t), "x"); err == nil {
		t.Error("Exists accepted a body without exists")
	}
	res, err := s.Run(testCtx(t), "true")
	if err != nil || res.ExitCode != -1 {
		t.Errorf("Run on {} = %+v, %v; want ExitCode -1", res, err)
	}
}

func TestSizeLimits(t *testing.T) {
	const limit = 1024
	_, srv := newRecorder(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/download/exact":
			_, _ = w.Write([]byte(strings.Repeat("a", limit)))
		case "/download/over":
			_, _ = w.Write([]byte(strings.Repeat("a", limit+1)))
		default:
			writeJSON(w, 200, `{}`)
		}
	})
	s := directSandbox(t, srv, func(o *Options) { o.MaxDownloadSize = limit; o.MaxUploadSize = limit })
	if b, err := s.Read(testCtx(t), "exact"); err != nil || len(b) != limit {
		t.Errorf("Read(exact) = %d bytes, %v", len(b), err)
	}
	if _, err := s.Read(testCtx(t), "over"); !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("Read(over) = %v, want ErrResponseTooLarge", err)
	}
	if err := s.Write(testCtx(t), "f", make([]byte, limit)); err != nil {
		t.Errorf("Write(exact) = %v", err)
	}
	if err := s.Write(testCtx(t), "f", make([]byte, limit+1)); err == nil {
		t.Error("Write(over) accepted")
	}
}

func TestSandboxdWritePathRules(t *testing.T) {
	for _, p := range []string{"", ".", "..", "dir/", "../x", "a/../b", "a/.."} {
		if err := checkSandboxdWritePath(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("checkSandboxdWritePath(%q) = %v, want ErrInvalidPath", p, err)
		}
	}
	for _, p := range []string{"", ".", "..", "dir/x", `dir\x`} {
		if err := checkLegacyWritePath(p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("checkLegacyWritePath(%q) = %v, want ErrInvalidPath", p, err)
		}
	}
	if err := checkPath("read", ""); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("checkPath(empty) = %v, want ErrInvalidPath", err)
	}
	for _, p := range []string{"a", "dir/file.txt", "/abs/ok", "a..b", "..hidden"} {
		if err := checkSandboxdWritePath(p); err != nil {
			t.Errorf("checkSandboxdWritePath(%q) = %v", p, err)
		}
	}
}

package legacy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/internal/sandboxdtest"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

const fuzzBoundary = "fuzzboundary"

// FuzzUpload feeds arbitrary multipart bodies (and part headers, so file
// names, filename* encodings and boundaries in odd places) to POST /upload.
// Invariants: no panic, only the statuses the API defines, a 200 names a
// file that now exists inside the root, and nothing outside the root (the
// temporary directory around it, which holds an "outside" target and a
// symlink to it inside the root) is ever created or changed.
func FuzzUpload(f *testing.F) {
	part := func(disposition, content string) []byte {
		return []byte("--" + fuzzBoundary + "\r\nContent-Disposition: " + disposition +
			"\r\nContent-Type: application/octet-stream\r\n\r\n" + content + "\r\n--" + fuzzBoundary + "--\r\n")
	}
	for _, seed := range [][]byte{
		part(`form-data; name="file"; filename="a.txt"`, "hello"),
		part(`form-data; name="file"; filename="sub/dir/b.txt"`, "x"),
		part(`form-data; name="file"; filename="../outside/secret"`, "pwned"),
		part(`form-data; name="file"; filename="esc/new"`, "pwned"),
		part(`form-data; name="file"; filename="/etc/passwd"`, "x"),
		part(`form-data; name="file"; filename*=UTF-8''..%2F..%2Fx`, "x"),
		part(`form-data; name="file"; filename="C:\\..\\x"`, "x"),
		part(`form-data; name="file"; filename="a\x00b"`, "x"),
		part(`form-data; name="file"`, "no filename"),
		part(`form-data; name="other"; filename="x"`, "wrong field"),
		[]byte("--" + fuzzBoundary + "\r\n\r\n--" + fuzzBoundary + "--"),
		[]byte("garbage"),
	} {
		f.Add(seed)
	}
	tmp := f.TempDir()
	outside := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		f.Fatal(err)
	}
	root, err := workspace.Open(filepath.Join(tmp, "app"))
	if err != nil {
		f.Fatal(err)
	}
	defer root.Close()
	if err := os.Symlink(outside, filepath.Join(root.Dir(), "esc")); err != nil {
		f.Fatal(err)
	}
	h := New(Config{Root: root})
	before := sandboxdtest.Tree(f, tmp, root.Dir())

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/upload", bytes.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+fuzzBoundary)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var m struct {
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Fatalf("200 with body %q", rec.Body.Bytes())
			}
			name := strings.TrimSuffix(strings.TrimPrefix(m.Message, "File '"), "' uploaded successfully.")
			rel, err := root.ResolveRelative(name)
			if err != nil {
				t.Fatalf("200 for unresolvable name %q: %v", name, err)
			}
			if fi, err := root.Stat(rel); err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("200 but %q (%q) is not a file: %v", name, rel, err)
			}
		case http.StatusBadRequest, http.StatusForbidden, http.StatusUnprocessableEntity, http.StatusInternalServerError:
		default:
			t.Fatalf("unexpected status %d: %s", rec.Code, rec.Body.Bytes())
		}
		if after := sandboxdtest.Tree(t, tmp, root.Dir()); after != before {
			t.Fatalf("outside the root changed:\n%s\n->\n%s", before, after)
		}
	})
}

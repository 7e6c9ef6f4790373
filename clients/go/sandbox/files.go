package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// Files groups the file operations of a Sandbox.
type Files struct{ s *Sandbox }

// Write stores content at path. See Sandbox.Write.
func (f *Files) Write(ctx context.Context, path string, content []byte, opts ...CallOption) error {
	return f.s.Write(ctx, path, content, opts...)
}

// Read returns the file at path. See Sandbox.Read.
func (f *Files) Read(ctx context.Context, path string, opts ...CallOption) ([]byte, error) {
	return f.s.Read(ctx, path, opts...)
}

// List lists the directory at path. See Sandbox.List.
func (f *Files) List(ctx context.Context, path string, opts ...CallOption) ([]FileEntry, error) {
	return f.s.List(ctx, path, opts...)
}

// Exists reports whether path exists. See Sandbox.Exists.
func (f *Files) Exists(ctx context.Context, path string, opts ...CallOption) (bool, error) {
	return f.s.Exists(ctx, path, opts...)
}

// Delete removes path. See Sandbox.Delete.
func (f *Files) Delete(ctx context.Context, path string, recursive bool, opts ...CallOption) error {
	return f.s.Delete(ctx, path, recursive, opts...)
}

// encodePath percent-encodes every byte outside A-Za-z0-9-_.~ (so "/"
// travels as %2F inside one segment and the server never sees a path it
// would clean or redirect), and encodes the dot segments "." and ".."
// entirely: routers and runtimes built on Go's ServeMux answer a literal
// dot segment with a redirect instead of serving it.
func encodePath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	switch s := b.String(); s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	default:
		return s
	}
}

// checkPath rejects an empty path before any I/O.
func checkPath(op, path string) error {
	if path == "" {
		return fmt.Errorf("sandbox: %s: path must not be empty: %w", op, ErrInvalidPath)
	}
	return nil
}

// checkLegacyWritePath: the legacy runtime takes the destination from the
// multipart filename, which this SDK restricts to a bare file name.
func checkLegacyWritePath(path string) error {
	if path == "" || path == "." || path == ".." || strings.ContainsAny(path, "/\\") {
		return fmt.Errorf("sandbox: write: legacy runtime path must be a bare file name (no directories, not . or ..), got %q: %w", path, ErrInvalidPath)
	}
	return nil
}

// checkSandboxdWritePath rejects paths that name no file or climb out of
// the workspace; sandboxd would refuse them too, but only after the upload.
func checkSandboxdWritePath(path string) error {
	switch {
	case path == "", path == ".", path == "..":
		return fmt.Errorf("sandbox: write: path %q names no file: %w", path, ErrInvalidPath)
	case strings.HasSuffix(path, "/"):
		return fmt.Errorf("sandbox: write: path %q ends with /: %w", path, ErrInvalidPath)
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == ".." {
			return fmt.Errorf("sandbox: write: path %q contains a .. segment: %w", path, ErrInvalidPath)
		}
	}
	return nil
}

// Write stores content at path. Legacy runtime: path is a bare file name
// in the runtime's working directory (POST /upload). sandboxd: path is
// relative to the workspace, parents are created (PUT /v1/files/{path}).
// Content larger than MaxUploadSize is refused before any I/O.
func (s *Sandbox) Write(ctx context.Context, path string, content []byte, opts ...CallOption) (err error) {
	co := applyCallOptions(defaultFileTries, opts)
	ctx, cancel := callContext(ctx, s.opts.RequestTimeout, co)
	defer cancel()
	ctx, span := s.startOp(ctx, "write", attribute.String(attrFilePath, path), attribute.Int(attrFileSize, len(content)))
	defer func() { recordErr(span, err); span.End() }()

	if int64(len(content)) > s.opts.MaxUploadSize {
		return fmt.Errorf("sandbox: write %q: %d bytes exceed MaxUploadSize (%d)", path, len(content), s.opts.MaxUploadSize)
	}
	var req request
	if s.opts.Runtime == RuntimeSandboxd {
		if err := checkSandboxdWritePath(path); err != nil {
			return err
		}
		req = request{op: "write", method: http.MethodPut, path: "v1/files/" + encodePath(path),
			body: bytes.NewReader(content), length: int64(len(content)), contentType: "application/octet-stream"}
	} else {
		if err := checkLegacyWritePath(path); err != nil {
			return err
		}
		body, ctype, err := multipartFile(path, content)
		if err != nil {
			return err
		}
		req = request{op: "write", method: http.MethodPost, path: "upload",
			body: bytes.NewReader(body), length: int64(len(body)), contentType: ctype}
	}
	conn, release, err := s.acquire("write")
	if err != nil {
		return err
	}
	defer release()
	req.attempts = co.maxAttempts
	resp, err := conn.http.do(ctx, req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONResponse))
	return resp.Body.Close()
}

// multipartFile builds the legacy upload body: one part named "file" whose
// filename is the destination.
func multipartFile(name string, content []byte) ([]byte, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", name)
	if err != nil {
		return nil, "", fmt.Errorf("sandbox: write: building upload: %w", err)
	}
	if _, err := fw.Write(content); err != nil {
		return nil, "", fmt.Errorf("sandbox: write: building upload: %w", err)
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("sandbox: write: building upload: %w", err)
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

// Read returns the content of the file at path, at most MaxDownloadSize
// bytes (ErrResponseTooLarge beyond). A missing file is an *HTTPError that
// matches ErrNotFound.
func (s *Sandbox) Read(ctx context.Context, path string, opts ...CallOption) (data []byte, err error) {
	co := applyCallOptions(defaultFileTries, opts)
	ctx, cancel := callContext(ctx, s.opts.RequestTimeout, co)
	defer cancel()
	ctx, span := s.startOp(ctx, "read", attribute.String(attrFilePath, path))
	defer func() {
		span.SetAttributes(attribute.Int(attrFileSize, len(data)))
		recordErr(span, err)
		span.End()
	}()
	if err := checkPath("read", path); err != nil {
		return nil, err
	}
	endpoint := "download/" + encodePath(path)
	if s.opts.Runtime == RuntimeSandboxd {
		endpoint = "v1/files/" + encodePath(path)
	}
	conn, release, err := s.acquire("read")
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := conn.http.do(ctx, request{op: "read", method: http.MethodGet, path: endpoint, attempts: co.maxAttempts})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	return readLimited(resp.Body, s.opts.MaxDownloadSize, "read")
}

// legacyEntry is one element of the legacy runtime's /list answer.
type legacyEntry struct {
	Name    string  `json:"name"`
	Size    int64   `json:"size"`
	Type    string  `json:"type"`
	ModTime float64 `json:"mod_time"`
}

// sandboxdListing is sandboxd's directory answer.
type sandboxdListing struct {
	Path    string `json:"path"`
	Entries []struct {
		Name       string `json:"name"`
		Size       int64  `json:"size"`
		Type       string `json:"type"`
		ModifiedAt string `json:"modified_at"`
		Mode       string `json:"mode"`
	} `json:"entries"`
}

// List lists the directory at path ("." is the working directory or
// workspace root). Entries that are neither files nor directories are
// left out.
func (s *Sandbox) List(ctx context.Context, path string, opts ...CallOption) (entries []FileEntry, err error) {
	co := applyCallOptions(defaultFileTries, opts)
	ctx, cancel := callContext(ctx, s.opts.RequestTimeout, co)
	defer cancel()
	ctx, span := s.startOp(ctx, "list", attribute.String(attrFilePath, path))
	defer func() {
		span.SetAttributes(attribute.Int(attrFileCount, len(entries)))
		recordErr(span, err)
		span.End()
	}()
	if err := checkPath("list", path); err != nil {
		return nil, err
	}
	endpoint := "list/" + encodePath(path)
	if s.opts.Runtime == RuntimeSandboxd {
		endpoint = "v1/files/" + encodePath(path)
	}
	conn, release, err := s.acquire("list")
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := conn.http.do(ctx, request{op: "list", method: http.MethodGet, path: endpoint, attempts: co.maxAttempts})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := readLimited(resp.Body, maxJSONResponse, "list")
	if err != nil {
		return nil, err
	}
	if s.opts.Runtime == RuntimeSandboxd {
		return parseSandboxdListing(b)
	}
	return parseLegacyListing(b)
}

func parseLegacyListing(b []byte) ([]FileEntry, error) {
	out := []FileEntry{}
	if len(bytes.TrimSpace(b)) == 0 {
		return out, nil
	}
	var raw []legacyEntry
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("sandbox: list: decoding response: %w", err)
	}
	for _, e := range raw {
		t := FileType(e.Type)
		if t != FileTypeFile && t != FileTypeDirectory {
			continue
		}
		out = append(out, FileEntry{Name: e.Name, Size: e.Size, Type: t, ModTime: epochTime(e.ModTime)})
	}
	return out, nil
}

// epochTime converts float epoch seconds to time, keeping sub-second
// precision.
func epochTime(sec float64) time.Time {
	if math.IsNaN(sec) || math.IsInf(sec, 0) {
		return time.Time{}
	}
	whole, frac := math.Modf(sec)
	return time.Unix(int64(whole), int64(frac*1e9)).UTC()
}

func parseSandboxdListing(b []byte) ([]FileEntry, error) {
	var l sandboxdListing
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("sandbox: list: decoding response: %w", err)
	}
	out := make([]FileEntry, 0, len(l.Entries))
	for _, e := range l.Entries {
		t := FileType(e.Type)
		if t != FileTypeFile && t != FileTypeDirectory {
			continue
		}
		fe := FileEntry{Name: e.Name, Size: e.Size, Type: t, Mode: e.Mode}
		if e.ModifiedAt != "" {
			mt, err := time.Parse(time.RFC3339Nano, e.ModifiedAt)
			if err != nil {
				return nil, fmt.Errorf("sandbox: list: entry %q: bad modified_at: %w", e.Name, err)
			}
			fe.ModTime = mt
		}
		out = append(out, fe)
	}
	return out, nil
}

// Exists reports whether path exists.
func (s *Sandbox) Exists(ctx context.Context, path string, opts ...CallOption) (exists bool, err error) {
	co := applyCallOptions(defaultFileTries, opts)
	ctx, cancel := callContext(ctx, s.opts.RequestTimeout, co)
	defer cancel()
	ctx, span := s.startOp(ctx, "exists", attribute.String(attrFilePath, path))
	defer func() {
		span.SetAttributes(attribute.Bool(attrFileExists, exists))
		recordErr(span, err)
		span.End()
	}()
	if err := checkPath("exists", path); err != nil {
		return false, err
	}
	conn, release, err := s.acquire("exists")
	if err != nil {
		return false, err
	}
	defer release()
	if s.opts.Runtime == RuntimeSandboxd {
		resp, err := conn.http.do(ctx, request{op: "exists", method: http.MethodHead, path: "v1/files/" + encodePath(path),
			attempts: co.maxAttempts, pass: func(code int) bool { return code == http.StatusNotFound }})
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode/100 == 2, nil
	}
	resp, err := conn.http.do(ctx, request{op: "exists", method: http.MethodGet, path: "exists/" + encodePath(path), attempts: co.maxAttempts})
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := readLimited(resp.Body, maxJSONResponse, "exists")
	if err != nil {
		return false, err
	}
	var v struct {
		Exists *bool `json:"exists"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return false, fmt.Errorf("sandbox: exists: decoding response: %w", err)
	}
	if v.Exists == nil {
		return false, fmt.Errorf("sandbox: exists: response has no \"exists\" field: %.100q", b)
	}
	return *v.Exists, nil
}

// Delete removes path (a directory only with recursive, or when empty).
// sandboxd only: the legacy runtime has no delete, and Delete returns
// ErrUnsupportedByRuntime there.
func (s *Sandbox) Delete(ctx context.Context, path string, recursive bool, opts ...CallOption) (err error) {
	co := applyCallOptions(defaultFileTries, opts)
	ctx, cancel := callContext(ctx, s.opts.RequestTimeout, co)
	defer cancel()
	ctx, span := s.startOp(ctx, "delete", attribute.String(attrFilePath, path))
	defer func() { recordErr(span, err); span.End() }()
	if s.opts.Runtime != RuntimeSandboxd {
		return fmt.Errorf("sandbox: delete: %w (runtime %s)", ErrUnsupportedByRuntime, s.opts.Runtime)
	}
	if err := checkPath("delete", path); err != nil {
		return err
	}
	conn, release, err := s.acquire("delete")
	if err != nil {
		return err
	}
	defer release()
	var q url.Values
	if recursive {
		q = url.Values{"recursive": {"true"}}
	}
	resp, err := conn.http.do(ctx, request{op: "delete", method: http.MethodDelete, path: "v1/files/" + encodePath(path),
		query: q, attempts: co.maxAttempts})
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJSONResponse))
	return resp.Body.Close()
}

package legacy

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"unicode/utf8"
)

// errNoFile means the form has no "file" part carrying a file name.
var errNoFile = errors.New("no file part")

// uploadPart finds the first multipart part named "file" that carries a
// filename, streaming: the body before it is skipped, nothing is buffered
// beyond the multipart reader's window. The caller reads the content from
// the returned part.
func uploadPart(contentType string, body io.Reader) (*multipart.Part, string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, "", errNoFile
	}
	mr := multipart.NewReader(body, params["boundary"])
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return nil, "", errNoFile
		}
		if err != nil {
			return nil, "", err
		}
		name, filename, hasFilename := parseDisposition(p.Header.Get("Content-Disposition"))
		if name == "file" && hasFilename {
			return p, filename, nil
		}
	}
}

// parseDisposition reads the form field name and file name of a part's
// Content-Disposition header. Unlike mime/multipart's Part.FileName it
// keeps directories in the file name, because the python runtime uses the
// whole name as the destination path. It is lenient like python-multipart:
// a malformed parameter is skipped, not an error. filename* (RFC 5987)
// wins over filename, and a Windows full path is cut to its base name as
// python-multipart does for old browsers.
func parseDisposition(h string) (name, filename string, hasFilename bool) {
	params := splitParams(h)
	if len(params) == 0 || !strings.EqualFold(strings.TrimSpace(params[0]), "form-data") {
		return "", "", false
	}
	var extended string
	var hasExtended bool
	for _, p := range params[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = unquoteParam(strings.TrimSpace(v))
		switch k {
		case "name":
			name = v
		case "filename":
			filename, hasFilename = v, true
		case "filename*":
			if dec, ok := decodeRFC5987(v); ok {
				extended, hasExtended = dec, true
			}
		}
	}
	if hasExtended {
		filename, hasFilename = extended, true
	}
	if !utf8.ValidString(filename) {
		// Starlette decodes header values as UTF-8 and falls back to
		// Latin-1, so every byte string is a (different) valid name.
		filename = latin1(filename)
	}
	if len(filename) >= 3 && filename[1:3] == `:\` || strings.HasPrefix(filename, `\\`) {
		filename = filename[strings.LastIndexByte(filename, '\\')+1:]
	}
	return name, filename, hasFilename
}

// splitParams splits a header value at semicolons outside quoted strings.
func splitParams(h string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(h); i++ {
		switch h[i] {
		case '\\':
			if quoted {
				i++
			}
		case '"':
			quoted = !quoted
		case ';':
			if !quoted {
				out = append(out, h[start:i])
				start = i + 1
			}
		}
	}
	return append(out, h[start:])
}

// unquoteParam strips the quotes of a quoted-string parameter value and
// undoes its \" and \\ escapes; other backslashes are kept because browsers
// send Windows paths unescaped.
func unquoteParam(v string) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return v
	}
	v = v[1 : len(v)-1]
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) && (v[i+1] == '"' || v[i+1] == '\\') {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// decodeRFC5987 decodes charset'lang'pct-encoded; only UTF-8 and
// ISO-8859-1 are understood, like the rest of the Python stack.
func decodeRFC5987(v string) (string, bool) {
	charset, rest, ok := strings.Cut(v, "'")
	if !ok {
		return "", false
	}
	_, enc, ok := strings.Cut(rest, "'")
	if !ok {
		return "", false
	}
	dec := unquote(enc)
	switch strings.ToLower(charset) {
	case "utf-8", "":
		return dec, true
	case "iso-8859-1", "latin-1", "latin1":
		return latin1(dec), true
	}
	return "", false
}

// latin1 decodes s as ISO-8859-1: each byte is one code point.
func latin1(s string) string {
	r := make([]rune, 0, len(s))
	for i := 0; i < len(s); i++ {
		r = append(r, rune(s[i]))
	}
	return string(r)
}

// isMultipart reports whether a request carries a multipart form.
func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

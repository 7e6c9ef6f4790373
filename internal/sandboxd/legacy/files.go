package legacy

import (
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	missing := validationError{Type: "missing", Loc: []string{"body", "file"}, Msg: "Field required", Input: nil}
	if !isMultipart(r) {
		unprocessable(w, missing)
		return
	}
	part, filename, err := uploadPart(r.Header.Get("Content-Type"), r.Body)
	if errors.Is(err, errNoFile) {
		unprocessable(w, missing)
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, detail{"There was an error parsing the body"})
		return
	}
	rel, err := s.cfg.Root.ResolveRelative(filename)
	if err != nil {
		pathError(w, err)
		return
	}
	if _, err := s.cfg.Root.WriteFile(rel, 0o644, part); err != nil {
		if r.Context().Err() != nil {
			return
		}
		s.log.Warn("upload failed", "path", rel, "err", err)
		writeJSON(w, http.StatusInternalServerError, message{"File upload failed: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, message{"File '" + filename + "' uploaded successfully."})
}

func (s *server) download(w http.ResponseWriter, r *http.Request, p string) {
	rel, err := s.cfg.Root.ResolveRelative(p)
	if err != nil {
		pathError(w, err)
		return
	}
	f, err := s.cfg.Root.Open(rel)
	if err != nil {
		writeJSON(w, http.StatusNotFound, message{"File not found"})
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		writeJSON(w, http.StatusNotFound, message{"File not found"})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", contentDisposition(path.Base(strings.TrimRight("/"+p, "/"))))
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// contentDisposition renders the header of Starlette's FileResponse: a
// quoted filename when URL quoting leaves it unchanged, else filename*.
func contentDisposition(name string) string {
	if q := pyQuote(name); q != name {
		return "attachment; filename*=utf-8''" + q
	}
	return `attachment; filename="` + name + `"`
}

// pyQuote is urllib.parse.quote with its default safe "/": everything but
// ASCII letters, digits, "_.-~" and "/" is percent-encoded as UTF-8 bytes.
func pyQuote(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

type listEntry struct {
	Name    string      `json:"name"`
	Size    int64       `json:"size"`
	Type    string      `json:"type"`
	ModTime pyFloatJSON `json:"mod_time"`
}

func (s *server) list(w http.ResponseWriter, _ *http.Request, p string) {
	rel, err := s.cfg.Root.ResolveRelative(p)
	if err != nil {
		pathError(w, err)
		return
	}
	if fi, err := s.cfg.Root.Stat(rel); err != nil || !fi.IsDir() {
		writeJSON(w, http.StatusNotFound, message{"Path is not a directory"})
		return
	}
	ents, err := s.cfg.Root.ReadDir(rel)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, message{"List files failed: " + err.Error()})
		return
	}
	out := make([]listEntry, 0, len(ents))
	for _, e := range ents {
		typ := "file"
		if e.Info.IsDir() {
			typ = "directory"
		}
		out = append(out, listEntry{Name: e.Name, Size: e.Info.Size(), Type: typ, ModTime: stMtime(e.Info)})
	}
	writeJSON(w, http.StatusOK, out)
}

// stMtime computes os.stat().st_mtime the way CPython does, from seconds
// and nanoseconds separately, so the float has the same digits.
func stMtime(fi fs.FileInfo) pyFloatJSON {
	t := fi.ModTime()
	return pyFloatJSON(float64(t.Unix()) + float64(t.Nanosecond())*1e-9)
}

func (s *server) exists(w http.ResponseWriter, _ *http.Request, p string) {
	rel, err := s.cfg.Root.ResolveRelative(p)
	if err != nil {
		pathError(w, err)
		return
	}
	_, err = s.cfg.Root.Stat(rel)
	writeJSON(w, http.StatusOK, struct {
		Path   string `json:"path"`
		Exists bool   `json:"exists"`
	}{p, err == nil})
}

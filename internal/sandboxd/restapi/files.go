package restapi

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name       string `json:"name"`
	Size       int64  `json:"size"`
	Type       string `json:"type"`
	ModifiedAt string `json:"modified_at"`
	Mode       string `json:"mode,omitempty"`
}

// DirectoryListing is the body of GET on a directory.
type DirectoryListing struct {
	Path    string      `json:"path"`
	Entries []FileEntry `json:"entries"`
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("path")
	rel, err := s.cfg.Root.Resolve(p)
	if err != nil {
		s.fsError(w, r, err)
		return
	}
	f, err := s.cfg.Root.Open(rel)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = fs.ErrNotExist
		}
		s.fsError(w, r, err)
		return
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		s.fsError(w, r, err)
		return
	}
	if !fi.IsDir() {
		w.Header().Set("Content-Type", "application/octet-stream")
		// ServeContent streams the file and handles Content-Length,
		// Last-Modified, Range, conditional requests and HEAD.
		http.ServeContent(w, r, fi.Name(), fi.ModTime(), f)
		return
	}
	ents, err := s.cfg.Root.ReadDir(rel)
	if err != nil {
		s.fsError(w, r, err)
		return
	}
	out := DirectoryListing{Path: "/" + p, Entries: make([]FileEntry, 0, len(ents))}
	for _, e := range ents {
		typ := "file"
		if e.Info.IsDir() {
			typ = "directory"
		}
		out.Entries = append(out.Entries, FileEntry{
			Name:       e.Name,
			Size:       e.Info.Size(),
			Type:       typ,
			ModifiedAt: e.Info.ModTime().UTC().Truncate(time.Second).Format(time.RFC3339),
			Mode:       fmt.Sprintf("%04o", uint32(e.Info.Mode().Perm())),
		})
	}
	slices.SortFunc(out.Entries, func(a, b FileEntry) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

var modeRE = regexp.MustCompile(`^0[0-7]{3}$`)

func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	perm := fs.FileMode(0o644)
	if m := r.URL.Query().Get("mode"); r.URL.Query().Has("mode") {
		if !modeRE.MatchString(m) {
			writeError(w, http.StatusBadRequest, CodeInvalidArgument, "mode must be an octal permission like 0644")
			return
		}
		v, _ := strconv.ParseUint(m, 8, 32)
		perm = fs.FileMode(v)
	}
	rel, err := s.cfg.Root.Resolve(r.PathValue("path"))
	if err != nil {
		s.fsError(w, r, err)
		return
	}
	body := io.Reader(r.Body)
	if mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == "multipart/form-data" {
		part, err := filePart(r.Body, params["boundary"])
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidArgument, err.Error())
			return
		}
		body = part
	}
	if _, err := s.cfg.Root.WriteFile(rel, perm, body); err != nil {
		if r.Context().Err() != nil {
			// The client is gone; WriteFile already removed the
			// temporary file.
			return
		}
		s.fsError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// filePart returns the first part of a multipart body whose form name is
// "file".
func filePart(body io.Reader, boundary string) (*multipart.Part, error) {
	if boundary == "" {
		return nil, errors.New("multipart body without boundary")
	}
	mr := multipart.NewReader(body, boundary)
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil, errors.New(`multipart body has no "file" part`)
		}
		if err != nil {
			return nil, fmt.Errorf("malformed multipart body: %w", err)
		}
		if p.FormName() == "file" {
			return p, nil
		}
	}
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	recursive := false
	if q := r.URL.Query(); q.Has("recursive") {
		v, err := strconv.ParseBool(q.Get("recursive"))
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidArgument, "recursive must be a boolean")
			return
		}
		recursive = v
	}
	rel, err := s.cfg.Root.Resolve(r.PathValue("path"))
	if err != nil {
		s.fsError(w, r, err)
		return
	}
	if err := s.cfg.Root.Remove(rel, recursive); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			err = fs.ErrNotExist
		}
		s.fsError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

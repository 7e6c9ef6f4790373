// Package restapi serves sandboxd's REST API on :8080: /v1/files/{path}
// (GET, HEAD, PUT, DELETE), /v1/health and /v1/metadata. Handler-made errors
// are JSON {"code","message"}; unknown paths and methods get the plain-text
// 404/405 of net/http's ServeMux, as upstream does.
package restapi

import (
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

// Error codes of the {"code","message"} body.
const (
	CodePermissionDenied = "PERMISSION_DENIED"
	CodeNotFound         = "NOT_FOUND"
	CodeInvalidArgument  = "INVALID_ARGUMENT"
	CodeConflict         = "CONFLICT"
	CodeInternal         = "INTERNAL"
	CodeUnavailable      = "UNAVAILABLE"
)

// Config configures the REST API.
type Config struct {
	// Root confines every path.
	Root *workspace.Root
	// MetadataEnvPrefix selects the environment variables /v1/metadata
	// reports; empty means "SANDBOX_".
	MetadataEnvPrefix string
	// Environ is the environment /v1/metadata reads; nil means os.Environ().
	Environ []string
	// Started is when the daemon started, for uptime; zero means now.
	Started time.Time
	// Logger receives failures; nil discards.
	Logger *slog.Logger
}

// Server is the REST API handler. It starts ready.
type Server struct {
	cfg      Config
	log      *slog.Logger
	mux      *http.ServeMux
	ready    atomic.Bool
	metadata map[string]string
}

// New builds the handler. The metadata map is computed here, once.
func New(cfg Config) *Server {
	if cfg.MetadataEnvPrefix == "" {
		cfg.MetadataEnvPrefix = "SANDBOX_"
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.metadata = FilterMetadata(cfg.Environ, cfg.MetadataEnvPrefix)
	s.ready.Store(true)
	// A GET pattern also serves HEAD.
	s.mux.HandleFunc("GET /v1/files/{path...}", s.getFile)
	s.mux.HandleFunc("PUT /v1/files/{path...}", s.putFile)
	s.mux.HandleFunc("DELETE /v1/files/{path...}", s.deleteFile)
	s.mux.HandleFunc("GET /v1/health", s.health)
	s.mux.HandleFunc("GET /v1/metadata", s.getMetadata)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetReady flips /v1/health between 200 and 503; shutdown sets it false
// first so load balancers stop sending work.
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "sandboxd is shutting down")
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Status        string `json:"status"`
		UptimeSeconds int64  `json:"uptime_seconds"`
	}{"ok", int64(time.Since(s.cfg.Started) / time.Second)})
}

func (s *Server) getMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Env map[string]string `json:"env"`
	}{s.metadata})
}

// sensitive name parts are never reported by /v1/metadata, whatever the
// prefix, so a SANDBOX_API_TOKEN cannot leak to anyone who can reach the
// daemon.
var sensitive = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY", "AUTH", "BEARER", "PRIVATE", "CERT"}

// FilterMetadata returns the variables of environ whose name starts with
// prefix and contains no sensitive part (case-insensitive). Entries without
// "=" or with an empty name are ignored.
func FilterMetadata(environ []string, prefix string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || !strings.HasPrefix(name, prefix) {
			continue
		}
		upper := strings.ToUpper(name)
		if containsAny(upper, sensitive) {
			continue
		}
		out[name] = value
	}
	return out
}

func containsAny(s string, parts []string) bool {
	for _, p := range parts {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fsError maps a file-system error to the API's status and code.
func (s *Server) fsError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, workspace.ErrEscape):
		writeError(w, http.StatusForbidden, CodePermissionDenied, workspace.ErrEscape.Error())
	case errors.Is(err, workspace.ErrInvalidPath):
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, err.Error())
	case errors.Is(err, workspace.ErrIsDir):
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, workspace.ErrIsDir.Error())
	case errors.Is(err, workspace.ErrNotEmpty), errors.Is(err, workspace.ErrRootDelete):
		writeError(w, http.StatusConflict, CodeConflict, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, CodeNotFound, "path does not exist within the sandbox")
	case errors.Is(err, fs.ErrPermission):
		writeError(w, http.StatusForbidden, CodePermissionDenied, "permission denied")
	case errors.Is(err, syscall.ENOTDIR):
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, "a parent of the path is not a directory")
	case errors.Is(err, syscall.ENAMETOOLONG):
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, "file name too long")
	default:
		s.log.Error("file operation failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

// Refuse answers a request refused before routing (ambiguous framing,
// cross-origin browser request) in the API's {"code","message"} shape.
func Refuse(w http.ResponseWriter, status int, msg string) {
	code := CodeInvalidArgument
	if status == http.StatusForbidden {
		code = CodePermissionDenied
	}
	writeError(w, status, code, msg)
}

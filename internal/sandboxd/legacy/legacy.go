// Package legacy serves the runtime API of the upstream python-runtime
// example on :8888 (POST /execute, POST /upload, GET /download/{path},
// GET /list/{path}, GET /exists/{path}, GET /), which every SDK speaks
// through the router by default. Status codes, JSON field names, messages
// and even the double percent-decoding of path parameters follow that
// FastAPI service, so existing clients cannot tell the difference.
package legacy

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/workspace"
)

// DefaultExecTimeout is the /execute timeout when SANDBOX_EXEC_TIMEOUT_SECONDS
// is unset or unusable.
const DefaultExecTimeout = 300 * time.Second

// Config configures the legacy API.
type Config struct {
	// Root confines every path; it is also the working directory of
	// commands (SANDBOX_BASE_DIR of the python runtime).
	Root *workspace.Root
	// ExecTimeout bounds each /execute; zero means DefaultExecTimeout.
	ExecTimeout ExecTimeout
	// MaxOutput caps stdout and stderr of /execute each, in bytes; the
	// response then carries "truncated": true. Zero means no cap.
	MaxOutput int
	// DrainGrace bounds how long /execute keeps reading output that
	// background children hold open after the command exited.
	DrainGrace time.Duration
	// Env is the environment of commands; nil inherits the daemon's.
	Env []string
	// Environ, when set, is called for every command and wins over Env:
	// it carries env late-bound after the daemon started.
	Environ func() []string
	// Logger receives one record per failed request; nil discards.
	Logger *slog.Logger
}

// ExecTimeout is a command timeout together with the text Python would print
// for it in a TimeoutExpired message ("300", "2.5", "10.0").
type ExecTimeout struct {
	D    time.Duration
	Text string
}

// ParseExecTimeout reads SANDBOX_EXEC_TIMEOUT_SECONDS the way the python
// runtime does: a float number of seconds; blank, invalid, non-finite or
// non-positive values fall back to 300 (warn reports why).
func ParseExecTimeout(v string) (t ExecTimeout, warn error) {
	def := ExecTimeout{D: DefaultExecTimeout, Text: "300"}
	v = strings.TrimSpace(v)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f <= 0 || f > math.MaxInt64/float64(time.Second) {
		return def, errors.New("invalid SANDBOX_EXEC_TIMEOUT_SECONDS " + strconv.Quote(v) + "; using 300")
	}
	return ExecTimeout{D: time.Duration(f * float64(time.Second)), Text: pyFloat(f)}, nil
}

type server struct {
	cfg    Config
	log    *slog.Logger
	routes []route
}

// New returns the legacy API handler.
func New(cfg Config) http.Handler {
	if cfg.ExecTimeout.D <= 0 {
		cfg.ExecTimeout = ExecTimeout{D: DefaultExecTimeout, Text: "300"}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg, log: log}
	s.routes = []route{
		{http.MethodGet, "/", func(w http.ResponseWriter, _ *http.Request, _ string) { s.health(w) }},
		{http.MethodPost, "/execute", func(w http.ResponseWriter, r *http.Request, _ string) { s.execute(w, r) }},
		{http.MethodPost, "/upload", func(w http.ResponseWriter, r *http.Request, _ string) { s.upload(w, r) }},
		{http.MethodGet, "/download/", s.download},
		{http.MethodGet, "/list/", s.list},
		{http.MethodGet, "/exists/", s.exists},
	}
	return s
}

// route is one FastAPI route: an exact path or, with a trailing slash, a
// prefix whose remainder is the {file_path:path} parameter.
type route struct {
	method  string
	path    string
	handler func(w http.ResponseWriter, r *http.Request, param string)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	for _, rt := range s.routes {
		var param string
		switch {
		case p == rt.path:
		case rt.path != "/" && strings.HasSuffix(rt.path, "/") && strings.HasPrefix(p, rt.path):
			// Starlette matches the raw path decoded once; the handlers
			// of the python runtime then unquote the parameter again.
			param = unquote(p[len(rt.path):])
		case rt.path != "/" && strings.HasSuffix(rt.path, "/") && p+"/" == rt.path:
			// Starlette's redirect_slashes.
			u := *r.URL
			u.Path += "/"
			u.RawPath = ""
			http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
			return
		default:
			continue
		}
		// Starlette serves HEAD wherever it serves GET.
		if r.Method != rt.method && (rt.method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", rt.method)
			writeJSON(w, http.StatusMethodNotAllowed, detail{"Method Not Allowed"})
			return
		}
		rt.handler(w, r, param)
		return
	}
	writeJSON(w, http.StatusNotFound, detail{"Not Found"})
}

func (s *server) health(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}{"ok", "Sandbox Runtime is active."})
}

// message is the error body of the python runtime's own responses.
type message struct {
	Message string `json:"message"`
}

// detail is the error body FastAPI itself produces (404, 405, and the 400s
// for paths the python runtime could not even represent).
type detail struct {
	Detail any `json:"detail"`
}

// writeJSON renders v like Starlette's JSONResponse: compact, UTF-8, no
// HTML escaping and no trailing newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"message":"internal error"}`)
	}
	body := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// pathError answers a path the workspace refused: an escape is the
// runtime's 403 "Access denied", anything else a 400.
func pathError(w http.ResponseWriter, err error) {
	if errors.Is(err, workspace.ErrEscape) {
		writeJSON(w, http.StatusForbidden, message{"Access denied"})
		return
	}
	writeJSON(w, http.StatusBadRequest, detail{err.Error()})
}

// Refuse answers a request refused before routing (ambiguous framing,
// cross-origin browser request) in FastAPI's error shape.
func Refuse(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, detail{msg})
}

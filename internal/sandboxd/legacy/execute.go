package legacy

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/procexec"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/shlex"
)

// maxCommandBody bounds the JSON body of /execute; a command line is never
// near that, and the limit keeps a hostile client from filling memory.
const maxCommandBody = 8 << 20

type executeResponse struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	// Truncated is an addition to the python runtime's response, present
	// only when an output cap cut stdout or stderr, so untruncated
	// responses stay byte-identical.
	Truncated bool `json:"truncated,omitempty"`
	// TimedOut is true when the command was killed for exceeding its
	// time limit; the published SDKs (k8s-agent-sandbox >= 1.0.8) read it
	// into ExecutionResult.timed_out. Omitted otherwise, like Truncated.
	TimedOut bool `json:"timed_out,omitempty"`
}

// validationError is one entry of FastAPI's 422 body.
type validationError struct {
	Type  string   `json:"type"`
	Loc   []string `json:"loc"`
	Msg   string   `json:"msg"`
	Input any      `json:"input"`
}

func unprocessable(w http.ResponseWriter, e validationError) {
	writeJSON(w, http.StatusUnprocessableEntity, detail{[]validationError{e}})
}

func (s *server) execute(w http.ResponseWriter, r *http.Request) {
	// A browser may send text/plain, form and multipart bodies to any
	// origin without a CORS preflight; refusing them (as FastAPI's JSON
	// body parsing does) means a cross-site page cannot run commands even
	// where the Origin check cannot tell, e.g. behind a proxy that drops
	// the header.
	if ct := r.Header.Get("Content-Type"); !isJSON(ct) {
		unprocessable(w, validationError{
			Type: "model_attributes_type", Loc: []string{"body"},
			Msg:   "Request body must be a JSON object sent as application/json (or a +json media type, or with no Content-Type); got Content-Type " + strconv.Quote(ct),
			Input: ct,
		})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCommandBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, detail{"request body too large"})
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		unprocessable(w, validationError{Type: "json_invalid", Loc: []string{"body"}, Msg: "JSON decode error", Input: map[string]any{}})
		return
	}
	raw, ok := fields["command"]
	if !ok {
		unprocessable(w, validationError{Type: "missing", Loc: []string{"body", "command"}, Msg: "Field required", Input: fields})
		return
	}
	var command string
	if err := json.Unmarshal(raw, &command); err != nil {
		unprocessable(w, validationError{Type: "string_type", Loc: []string{"body", "command"}, Msg: "Input should be a valid string", Input: raw})
		return
	}
	timeout, verr := s.commandTimeout(fields["timeout_seconds"])
	if verr != nil {
		unprocessable(w, *verr)
		return
	}

	resp, ok := s.run(r, command, timeout)
	if !ok {
		// The client went away; the process group is already dead and
		// nobody is left to read an answer.
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// isJSON reports whether a request Content-Type is one FastAPI parses as
// JSON: none at all, application/json, or application/<anything>+json.
func isJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// commandTimeout validates the optional "timeout_seconds" of a request
// (a positive number of seconds; null or absent means the server's limit)
// and returns the limit to apply. The server's limit
// (SANDBOX_EXEC_TIMEOUT_SECONDS) is also the ceiling: a client may ask for
// less time, never for more.
func (s *server) commandTimeout(raw json.RawMessage) (ExecTimeout, *validationError) {
	limit := s.cfg.ExecTimeout
	if raw == nil || string(raw) == "null" {
		return limit, nil
	}
	loc := []string{"body", "timeout_seconds"}
	var f float64
	// Only JSON numbers: json.Unmarshal refuses strings and booleans for
	// a float64.
	if err := json.Unmarshal(raw, &f); err != nil {
		return limit, &validationError{Type: "float_type", Loc: loc, Msg: "Input should be a valid number", Input: raw}
	}
	if math.IsNaN(f) || f <= 0 {
		return limit, &validationError{Type: "greater_than", Loc: loc, Msg: "Input should be greater than 0", Input: raw}
	}
	if f >= limit.D.Seconds() {
		return limit, nil
	}
	return ExecTimeout{D: time.Duration(f * float64(time.Second)), Text: pyFloat(f)}, nil
}

// run executes one command line and renders the outcome the way the python
// runtime does. ok is false when the request context ended first.
func (s *server) run(r *http.Request, command string, timeout ExecTimeout) (executeResponse, bool) {
	failed := func(msg string) (executeResponse, bool) {
		return executeResponse{Stderr: "Failed to execute command: " + msg, ExitCode: 1}, true
	}
	argv, err := shlex.Split(command)
	if err != nil {
		return failed(err.Error())
	}
	if len(argv) == 0 {
		// What subprocess.run([]) raises.
		return failed("list index out of range")
	}
	res, err := procexec.Run(r.Context(), procexec.Spec{
		Argv:       argv,
		Dir:        s.cfg.Root.Dir(),
		Env:        s.env(),
		Timeout:    timeout.D,
		MaxOutput:  s.cfg.MaxOutput,
		DrainGrace: s.cfg.DrainGrace,
	})
	switch {
	case errors.Is(err, procexec.ErrTimeout):
		// The python runtime's TimeoutExpired message, and no partial
		// output: like every other failure, stdout is "" and stderr the
		// reason. timed_out tells clients apart from a command that
		// failed with exit code 1 on its own.
		s.log.Info("command timed out", "argv0", argv[0], "timeout", timeout.D)
		res, ok := failed("Command '" + pyList(argv) + "' timed out after " + timeout.Text + " seconds")
		res.TimedOut = true
		return res, ok
	case r.Context().Err() != nil:
		s.log.Info("client disconnected; command killed", "argv0", argv[0])
		return executeResponse{}, false
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return failed("[Errno 2] No such file or directory: " + pyStr(argv[0]))
	case errors.Is(err, fs.ErrPermission):
		return failed("[Errno 13] Permission denied: " + pyStr(argv[0]))
	case err != nil:
		return failed(err.Error())
	}
	code := res.ExitCode
	if res.Signal != 0 {
		// subprocess reports death by signal N as return code -N.
		code = -int(res.Signal)
	}
	return executeResponse{
		Stdout:    textMode(res.Stdout),
		Stderr:    textMode(res.Stderr),
		ExitCode:  code,
		Truncated: res.StdoutTruncated || res.StderrTruncated,
	}, true
}

// textMode applies what subprocess's text mode does to captured output:
// universal newlines turn "\r\n" and "\r" into "\n". Invalid UTF-8 becomes
// U+FFFD when the response is encoded.
func textMode(b []byte) string {
	s := string(b)
	if strings.IndexByte(s, '\r') < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// env is the environment of a command started now.
func (s *server) env() []string {
	if s.cfg.Environ != nil {
		return s.cfg.Environ()
	}
	return s.cfg.Env
}

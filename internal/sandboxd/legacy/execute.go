package legacy

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os/exec"
	"strings"

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

	resp, ok := s.run(r, command)
	if !ok {
		// The client went away; the process group is already dead and
		// nobody is left to read an answer.
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// run executes one command line and renders the outcome the way the python
// runtime does. ok is false when the request context ended first.
func (s *server) run(r *http.Request, command string) (executeResponse, bool) {
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
		Env:        s.cfg.Env,
		Timeout:    s.cfg.ExecTimeout.D,
		MaxOutput:  s.cfg.MaxOutput,
		DrainGrace: s.cfg.DrainGrace,
	})
	switch {
	case errors.Is(err, procexec.ErrTimeout):
		s.log.Info("command timed out", "argv0", argv[0], "timeout", s.cfg.ExecTimeout.D)
		return failed("Command '" + pyList(argv) + "' timed out after " + s.cfg.ExecTimeout.Text + " seconds")
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

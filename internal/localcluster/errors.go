package localcluster

import "fmt"

// Error is a failure the user can act on: what went wrong and how to fix it.
// The CLI prints it as one line instead of a wrapped error chain.
type Error struct {
	// Cause says what is wrong, e.g. "port 127.0.0.1:2379 is in use by pid 42 (etcd)".
	Cause string
	// Fix says what to do about it, e.g. "stop that process, or run `agent-sandbox down`".
	Fix string
	// Err is the underlying error, if any, kept for errors.Is/As.
	Err error
}

func (e *Error) Error() string {
	msg := e.Cause
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Fix != "" {
		msg += " (fix: " + e.Fix + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// userError builds an *Error with a formatted cause.
func userError(err error, fix string, format string, args ...any) *Error {
	return &Error{Cause: fmt.Sprintf(format, args...), Fix: fix, Err: err}
}

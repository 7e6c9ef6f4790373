package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// PodNameAnnotation on a Sandbox names its Pod when the Pod name differs
// from the Sandbox name (warm-pool sandboxes).
const PodNameAnnotation = "agents.x-k8s.io/pod-name"

// Sentinel errors. Test with errors.Is; most are wrapped with context.
var (
	// ErrNotReady: the handle is not connected (never opened, closed,
	// disconnected, or its tunnel died).
	ErrNotReady = errors.New("sandbox is not ready")
	// ErrTimeout: a deadline passed (a wait, or the call's timeout).
	ErrTimeout = errors.New("operation timed out")
	// ErrClaimFailed: the SandboxClaim could not be created.
	ErrClaimFailed = errors.New("claim creation failed")
	// ErrPortForwardDied: the port-forward tunnel ended; Open again.
	ErrPortForwardDied = errors.New("port-forward connection lost")
	// ErrAlreadyOpen: Open on a connected handle.
	ErrAlreadyOpen = errors.New("sandbox is already open; call Close first")
	// ErrOrphanedClaim: the handle holds a claim it cannot use right now:
	// a deletion failed, or the claim's sandbox is gone, unreadable or not
	// Ready. The error says which; Open again to retry the attachment, or
	// Close to delete the claim (Close retries a failed deletion).
	ErrOrphanedClaim = errors.New("orphaned claim")
	// ErrRetriesExhausted: every attempt of a call failed; wraps the last
	// error.
	ErrRetriesExhausted = errors.New("retries exhausted")
	// ErrSandboxDeleted: the claim or sandbox was deleted while waiting
	// for it, or before a reconnect.
	ErrSandboxDeleted = errors.New("sandbox was deleted before becoming ready")
	// ErrGatewayDeleted: the Gateway was deleted during address discovery.
	ErrGatewayDeleted = errors.New("gateway was deleted during address discovery")
	// ErrResponseTooLarge: a response exceeded its size limit.
	ErrResponseTooLarge = errors.New("response exceeded size limit")
	// ErrUnsupportedByRuntime: the operation does not exist in the
	// selected runtime's API (e.g. Delete with RuntimeLegacyPython).
	ErrUnsupportedByRuntime = errors.New("operation not supported by the sandbox runtime")
	// ErrNotFound matches a 404 from the sandbox (a missing file), a
	// NotFound gRPC status (unknown process or binary), and a missing claim
	// in Client.GetSandbox. Extension over the published SDK, which has no
	// such sentinel.
	ErrNotFound = errors.New("not found")
	// ErrInvalidPath: a file path the SDK refuses before any I/O (empty,
	// naming no file, climbing out of the workspace). Extension over the
	// published SDK, whose errors are untyped here; the Python and
	// TypeScript SDKs raise ValueError and TypeError for the same paths.
	ErrInvalidPath = errors.New("invalid path")
)

// HTTPError is a non-2xx answer from the sandbox or the router.
type HTTPError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Body is the response body (at most 512 bytes), or "CODE: message"
	// for sandboxd's JSON errors.
	Body string
	// Operation is the SDK operation, e.g. "read".
	Operation string
	// Code is sandboxd's error code (e.g. "NOT_FOUND"), empty otherwise.
	Code string
	// Detail is the human-readable message extracted from the body: the
	// router's "detail", the legacy runtime's "message" or sandboxd's
	// "message"; empty when the body had none.
	Detail string
}

func (e *HTTPError) Error() string {
	body := e.Body
	if len(body) > 256 {
		body = body[:256] + "... [truncated]"
	}
	return fmt.Sprintf("sandbox: %s returned status %d: %s", e.Operation, e.StatusCode, body)
}

// Is makes a 404 match ErrNotFound.
func (e *HTTPError) Is(target error) bool {
	return target == ErrNotFound && e.StatusCode == 404
}

// ExecutionResult is the outcome of a command.
type ExecutionResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// UnmarshalJSON defaults ExitCode to -1 when the field is absent, so a
// truncated or foreign answer never reads as success.
func (r *ExecutionResult) UnmarshalJSON(b []byte) error {
	type plain ExecutionResult
	p := plain{ExitCode: -1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = ExecutionResult(p)
	return nil
}

// FileType is the kind of a FileEntry.
type FileType string

// File types. Entries of any other type are not reported.
const (
	FileTypeFile      FileType = "file"
	FileTypeDirectory FileType = "directory"
)

// FileEntry is one entry of a directory listing.
type FileEntry struct {
	Name    string
	Size    int64
	Type    FileType
	ModTime time.Time
	// Mode is the permission bits in octal (e.g. "0644"); sandboxd only.
	Mode string
}

// Runtime selects the in-sandbox API.
type Runtime string

const (
	// RuntimeLegacyPython is the python-runtime API (port 8888), reached
	// through the sandbox-router. Default.
	RuntimeLegacyPython Runtime = "legacy-python"
	// RuntimeSandboxd is sandboxd's REST files API (port 8080) and gRPC
	// process API (port 9090).
	RuntimeSandboxd Runtime = "sandboxd"
)

// Key identifies a sandbox in a Client's registry.
type Key struct {
	Namespace string
	ClaimName string
}

func (k Key) String() string { return k.Namespace + "/" + k.ClaimName }

// CallOption adjusts one call.
type CallOption func(*callOptions)

type callOptions struct {
	timeout     time.Duration
	maxAttempts int
}

// WithTimeout bounds the whole call, retries included, overriding
// Options.RequestTimeout. A deadline already on the caller's context still
// applies if it is earlier.
func WithTimeout(d time.Duration) CallOption {
	return func(o *callOptions) { o.timeout = d }
}

// WithMaxAttempts sets how many attempts a call may make (n <= 0 is
// ignored). Defaults: 1 for Run, 6 for file operations.
func WithMaxAttempts(n int) CallOption {
	return func(o *callOptions) {
		if n > 0 {
			o.maxAttempts = n
		}
	}
}

// Handle is the operations of a sandbox, for code that wants to accept a
// mock. *Sandbox implements it.
type Handle interface {
	Open(ctx context.Context) error
	Close(ctx context.Context) error
	Disconnect(ctx context.Context) error
	IsReady() bool

	Run(ctx context.Context, command string, opts ...CallOption) (*ExecutionResult, error)
	Write(ctx context.Context, path string, content []byte, opts ...CallOption) error
	Read(ctx context.Context, path string, opts ...CallOption) ([]byte, error)
	List(ctx context.Context, path string, opts ...CallOption) ([]FileEntry, error)
	Exists(ctx context.Context, path string, opts ...CallOption) (bool, error)
}

// Info is the identity of a sandbox. *Sandbox implements it.
type Info interface {
	ClaimName() string
	SandboxName() string
	PodName() string
	PodIP() string
	Annotations() map[string]string
}

// ConnectionStrategy produces the base URL requests are sent to.
type ConnectionStrategy interface {
	// Connect establishes whatever the strategy needs (a tunnel, a
	// discovered address) and returns the base URL.
	Connect(ctx context.Context) (baseURL string, err error)
	// Close releases it.
	Close() error
}

// DirectStrategy sends requests to a fixed URL.
type DirectStrategy struct {
	URL string
}

// Connect returns the URL.
func (d *DirectStrategy) Connect(context.Context) (string, error) { return d.URL, nil }

// Close does nothing.
func (d *DirectStrategy) Close() error { return nil }

var (
	_ Handle = (*Sandbox)(nil)
	_ Info   = (*Sandbox)(nil)
)

package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// Exit codes of the CLI. `exec` exits with the remote command's code
// instead (see exitCodeError).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitSignaled is exec's code when the remote process was killed by a
	// signal and sandboxd could not say which (128+SIGKILL, as a shell
	// would report a killed child); exitInterrupted when it was the
	// SIGINT the user sent (128+SIGINT).
	exitSignaled    = 137
	exitInterrupted = 130
)

// exitCodeError makes Execute exit with code without printing anything:
// the command already said what it had to (exec's remote exit status).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// usageError is a command line that cannot work; it exits with 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// fixError carries the fix to try with an error.
type fixError struct {
	err error
	fix string
}

func (e *fixError) Error() string { return e.err.Error() }
func (e *fixError) Unwrap() error { return e.err }

// withFix attaches the fix to err (nil stays nil).
func withFix(err error, fix string) error {
	if err == nil {
		return nil
	}
	return &fixError{err: err, fix: fix}
}

// describe returns the one-line message and the fix for err: the fix
// attached with withFix, else one inferred from well-known causes.
func describe(err error, prog string) (msg, fix string) {
	msg = oneLine(err.Error())
	var fe *fixError
	if errors.As(err, &fe) {
		return msg, fe.fix
	}
	var nf *remote.NotFoundError
	var failed *remote.FailedError
	switch {
	case errors.As(err, &nf):
		return msg, fmt.Sprintf("list sandboxes with `%s ls -n %s`", prog, nf.Namespace)
	case errors.Is(err, remote.ErrWarmMember):
		return msg, fmt.Sprintf("claim a sandbox of your own with `%s create --pool POOL`", prog)
	case errors.Is(err, remote.ErrSuspended):
		return msg, fmt.Sprintf("resume it with `%s resume NAME` first", prog)
	case errors.As(err, &failed):
		switch failed.Reason {
		case "WarmPoolNotFound":
			return msg, "list warm pools with `kubectl get sandboxwarmpools -n " + failed.Namespace + "`"
		case "TemplateNotFound":
			return msg, "the warm pool names a SandboxTemplate that does not exist; create it or fix the pool"
		}
		return msg, "see `kubectl describe` of the object for events"
	case errors.Is(err, sandbox.ErrNotReady) && strings.Contains(msg, sandbox.RouterServiceName):
		return msg, "deploy the sandbox-router in this namespace, or pass --router-url"
	case errors.Is(err, sandbox.ErrPortForwardDied):
		return msg, "run the command again; pass -v to see why the port-forward ended"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sandbox.ErrTimeout):
		return msg, "raise --timeout, or check the sandbox with `" + prog + " ls`"
	case apierrors.IsForbidden(err):
		return msg, "your Kubernetes user lacks the permission; check it with `kubectl auth can-i`"
	case apierrors.IsNotFound(err) && strings.Contains(msg, "the server could not find the requested resource"):
		return msg, "install the agent-sandbox CRDs in the cluster (`agent-sandbox up` does it locally)"
	case isConnRefused(err):
		return msg, "is the cluster running? check --kubeconfig/--context (local cluster: `agent-sandbox up`)"
	case apierrors.IsAlreadyExists(err):
		return msg, "choose another --name or remove the old one with `" + prog + " rm`"
	}
	return msg, ""
}

func isConnRefused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// oneLine collapses whitespace (newlines from remote stderr, API errors)
// so every error prints as one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

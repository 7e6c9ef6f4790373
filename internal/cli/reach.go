package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// reachError explains an error of a call into a sandbox that failed on
// the way there, not in the sandbox: the router URL does not answer, or
// the router answers but the sandbox's runtime does not (an image without
// sandboxd). It returns nil for any other error. Each cause gets its own
// message and fix: the generic "check the command exists" would send the
// user looking in the wrong place.
func reachError(err error, flags *clusterFlags, name, prog string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var he *sandbox.HTTPError
	badGateway := (errors.As(err, &he) && he.StatusCode == http.StatusBadGateway) ||
		(status.Code(err) == codes.Unavailable && strings.Contains(msg, "502"))
	switch {
	case badGateway:
		return withFix(fmt.Errorf("sandbox %s does not answer: the sandbox-router could not connect to its runtime (502 Bad Gateway)", name),
			fmt.Sprintf("the sandbox's image must run sandboxd, the agent-sandbox runtime (ports 8888, 8080, 9090); "+
				"check the image of its template and what the Pod printed (`%s logs %s`)", prog, name))
	case flags.routerURL != "" && (errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(msg, "connection refused")):
		return withFix(fmt.Errorf("cannot reach the sandbox-router at --router-url %s: connection refused", flags.routerURL),
			"check --router-url (scheme, host and port of the router's Service or ingress), or leave it out to port-forward to the router")
	case flags.routerURL != "" && (strings.Contains(msg, "no such host") || strings.Contains(msg, "i/o timeout")):
		return withFix(fmt.Errorf("cannot reach the sandbox-router at --router-url %s: %s", flags.routerURL, lastCause(msg)),
			"check --router-url, or leave it out to port-forward to the router")
	}
	return nil
}

// lastCause is the innermost part of a chain of "context: cause" messages.
func lastCause(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// startError explains why a command could not be started in a sandbox.
func startError(ctx context.Context, sb *sandbox.Sandbox, err error, flags *clusterFlags, name, prog string, argv []string, workdir string) error {
	if rerr := reachError(err, flags, name, prog); rerr != nil {
		return rerr
	}
	cmdline := strings.Join(argv, " ")
	switch status.Code(err) {
	case codes.NotFound:
		// os/exec reports a failed chdir as "fork/exec <command>: no such
		// file or directory": ask the sandbox which one is missing.
		if workdir != "" {
			if exists, xerr := sb.Exists(ctx, workdir); xerr == nil && !exists {
				return withFix(fmt.Errorf("working directory %q does not exist in sandbox %s", workdir, name),
					fmt.Sprintf("create it first (`%s exec %s -- mkdir -p %s`), or pass an existing -w (relative to the workspace)", prog, name, workdir))
			}
		}
		return withFix(fmt.Errorf("command %q not found in sandbox %s: %s", argv[0], name, lastCause(status.Convert(err).Message())),
			fmt.Sprintf("check that %s is installed in the sandbox's image (`%s exec %s -- sh -c 'command -v %s'`); run shell syntax through `sh -c`",
				argv[0], prog, name, argv[0]))
	case codes.PermissionDenied:
		return withFix(fmt.Errorf("%q cannot be run in sandbox %s: %s", argv[0], name, lastCause(status.Convert(err).Message())),
			fmt.Sprintf("make it executable (`%s exec %s -- chmod +x %s`), or run it through its interpreter", prog, name, argv[0]))
	}
	return withFix(fmt.Errorf("starting %q in sandbox %s: %w", cmdline, name, err),
		"run it again; pass -v to see the connection's logs")
}

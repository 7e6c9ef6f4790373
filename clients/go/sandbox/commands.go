package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
)

// Commands groups the command operations of a Sandbox.
type Commands struct{ s *Sandbox }

// Run runs command and returns its result. See Sandbox.Run.
func (c *Commands) Run(ctx context.Context, command string, opts ...CallOption) (*ExecutionResult, error) {
	return c.s.Run(ctx, command, opts...)
}

// Start starts a streaming process. See Sandbox.Start.
func (c *Commands) Start(ctx context.Context, argv []string, opts *ProcessOptions) (*Process, error) {
	return c.s.Start(ctx, argv, opts)
}

// Run runs command in the sandbox and waits for it. A non-zero exit code
// is a result, not an error.
//
// With RuntimeLegacyPython the command goes to POST /execute, which splits
// it like a POSIX shell but runs it without one: pipes, redirects and &&
// need an explicit `sh -c '...'`. With RuntimeSandboxd it runs as
// `/bin/sh -c command` through the gRPC process API.
//
// Run makes one attempt by default, since a command may not be safe to
// repeat; WithMaxAttempts opts in to retries (legacy runtime only).
func (s *Sandbox) Run(ctx context.Context, command string, opts ...CallOption) (res *ExecutionResult, err error) {
	co := applyCallOptions(defaultRunTries, opts)
	ctx, cancel := callContext(ctx, s.opts.RequestTimeout, co)
	defer cancel()
	exe := command
	if f := strings.Fields(command); len(f) > 0 {
		exe = f[0]
	}
	ctx, span := s.startOp(ctx, "run", attribute.String(attrCommandExecutable, exe))
	defer func() {
		if res != nil {
			span.SetAttributes(attribute.Int(attrExitCode, res.ExitCode))
		}
		recordErr(span, err)
		span.End()
	}()
	if strings.TrimSpace(command) == "" {
		return nil, fmt.Errorf("sandbox: run: command must not be empty")
	}
	conn, release, err := s.acquire("run")
	if err != nil {
		return nil, err
	}
	defer release()
	if s.opts.Runtime == RuntimeSandboxd {
		return s.runGRPC(ctx, conn, command)
	}
	body, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		return nil, fmt.Errorf("sandbox: run: encoding request: %w", err)
	}
	resp, err := conn.http.do(ctx, request{op: "run", method: http.MethodPost, path: "execute",
		body: bytes.NewReader(body), length: int64(len(body)), contentType: "application/json", attempts: co.maxAttempts})
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := readLimited(resp.Body, maxRunResponse, "run")
	if err != nil {
		return nil, err
	}
	var r ExecutionResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("sandbox: run: decoding response: %w", err)
	}
	return &r, nil
}

// runGRPC is Run for sandboxd: one Execute call of /bin/sh -c command.
func (s *Sandbox) runGRPC(ctx context.Context, conn *connection, command string) (*ExecutionResult, error) {
	pc, err := conn.processClient("run")
	if err != nil {
		return nil, err
	}
	rctx := conn.rpcContext(ctx, s.rpcIdentity(), newRequestID())
	resp, err := pc.Execute(rctx, &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{
		Command: []string{"/bin/sh", "-c", command},
	}})
	if err != nil {
		return nil, rpcError(ctx, "run", err)
	}
	return &ExecutionResult{Stdout: string(resp.GetStdout()), Stderr: string(resp.GetStderr()), ExitCode: int(resp.GetExitCode())}, nil
}

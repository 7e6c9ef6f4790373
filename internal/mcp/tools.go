package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/capbuf"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
)

// Limits of the tool arguments, as in the upstream server.
const (
	defaultTimeout             = 60.0
	maxTimeout                 = 600.0
	defaultReadyTimeout        = 180.0
	defaultShutdownAfter       = 300
	defaultMaxEntries          = 1000
	maxMaxEntries              = 10000
	maxOutputBytes             = 16 << 20 // per stream of execute_command
	progressInterval           = 250 * time.Millisecond
	progressHeartbeat          = 5 * time.Second
	maxProgressMessage         = 2000
	sandboxNotFoundMessageForm = "Sandbox claim '%s' is not found in namespace '%s'."
)

type createIn struct {
	WarmPool             string            `json:"warmpool" jsonschema:"name of the SandboxWarmPool to claim a sandbox from"`
	Namespace            string            `json:"namespace,omitempty" jsonschema:"Kubernetes namespace of the warm pool and the new claim (default: the server's namespace)"`
	SandboxReadyTimeout  float64           `json:"sandbox_ready_timeout,omitempty" jsonschema:"seconds to wait for the sandbox to be Ready (default 180)"`
	Labels               map[string]string `json:"labels,omitempty" jsonschema:"labels for the SandboxClaim"`
	ShutdownAfterSeconds int               `json:"shutdown_after_seconds,omitempty" jsonschema:"the sandbox is deleted this many seconds after creation (default: the server's, 300 unless configured)"`
	PodLabels            map[string]string `json:"pod_labels,omitempty" jsonschema:"labels for the sandbox's Pod"`
	PodAnnotations       map[string]string `json:"pod_annotations,omitempty" jsonschema:"annotations for the sandbox's Pod"`
	Env                  map[string]string `json:"env,omitempty" jsonschema:"environment variables for the sandbox's commands, if its template allows env injection (warm when the template supports late binding)"`
}

type createOut struct {
	SandboxClaimName string `json:"sandbox_claim_name"`
}

type claimIn struct {
	SandboxClaimName string `json:"sandbox_claim_name" jsonschema:"name of the SandboxClaim returned by create_sandbox"`
	Namespace        string `json:"namespace,omitempty" jsonschema:"Kubernetes namespace of the sandbox (default: the server's namespace)"`
}

type deleteOut struct {
	SandboxClaimName string `json:"sandbox_claim_name"`
	Deleted          bool   `json:"deleted"`
}

type execIn struct {
	claimIn
	Command string  `json:"command" jsonschema:"command line, run by /bin/sh -c in the sandbox's workspace"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type execOut struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

type uploadIn struct {
	claimIn
	Path    string  `json:"path" jsonschema:"destination path, relative to the sandbox's workspace (parent directories are created)"`
	Content string  `json:"content" jsonschema:"file content: text, or base64 when binary is true"`
	Binary  bool    `json:"binary,omitempty" jsonschema:"content is base64-encoded binary data"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type uploadOut struct {
	BytesWritten int `json:"bytes_written"`
}

type downloadIn struct {
	claimIn
	Path    string  `json:"path" jsonschema:"file path, relative to the sandbox's workspace"`
	Binary  bool    `json:"binary,omitempty" jsonschema:"return the content base64-encoded (needed for non-UTF-8 files)"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type downloadOut struct {
	Content   string `json:"content"`
	BytesRead int    `json:"bytes_read"`
}

type listIn struct {
	claimIn
	Path       string  `json:"path" jsonschema:"directory path, relative to the sandbox's workspace (. for the workspace)"`
	Timeout    float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
	MaxEntries int     `json:"max_entries,omitempty" jsonschema:"most entries to return, 1 to 10000 (default 1000)"`
}

type entryOut struct {
	Name    string  `json:"name"`
	Size    int64   `json:"size"`
	Type    string  `json:"type"`
	ModTime float64 `json:"mod_time"`
}

type listOut struct {
	Entries      []entryOut `json:"entries"`
	TotalEntries int        `json:"total_entries"`
	Truncated    bool       `json:"truncated"`
}

type existsIn struct {
	claimIn
	Path    string  `json:"path" jsonschema:"path, relative to the sandbox's workspace"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type existsOut struct {
	Exists bool `json:"exists"`
}

// inputSchema infers the schema of T and records defaults, which the MCP
// SDK fills in before the handler runs.
func inputSchema[T any](defaults map[string]any) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err)) // a programming error, caught by tests
	}
	for name, v := range defaults {
		p := s.Properties[name]
		if p == nil {
			panic(fmt.Sprintf("mcp: schema of %T has no property %q", *new(T), name))
		}
		b, _ := json.Marshal(v)
		p.Default = b
	}
	return s
}

func (s *Server) addTools() {
	timeoutDefault := map[string]any{"timeout": defaultTimeout}
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name: "create_sandbox",
		Description: "Create a sandbox from a SandboxWarmPool and wait until it is Ready. Returns the " +
			"sandbox_claim_name that the other tools take. The sandbox is deleted after shutdown_after_seconds.",
		InputSchema: inputSchema[createIn](map[string]any{
			"sandbox_ready_timeout": defaultReadyTimeout, "shutdown_after_seconds": int(s.cfg.DefaultShutdownAfter / time.Second),
		}),
	}, s.createSandbox)
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "delete_sandbox",
		Description: "Delete a sandbox this session created (its claim, Sandbox, Pod and volumes).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true},
	}, s.deleteSandbox)
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name: "execute_command",
		Description: "Run a shell command in a sandbox and return its exit code, stdout and stderr. " +
			"Output is streamed as progress notifications when the request has a progress token.",
		InputSchema: inputSchema[execIn](timeoutDefault),
	}, s.executeCommand)
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "upload_file",
		Description: "Write a file in a sandbox (text, or base64 with binary=true).",
		InputSchema: inputSchema[uploadIn](timeoutDefault),
	}, s.uploadFile)
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "download_file",
		Description: "Read a file from a sandbox (as text, or base64 with binary=true).",
		InputSchema: inputSchema[downloadIn](timeoutDefault),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, s.downloadFile)
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "list_files",
		Description: "List a directory of a sandbox: name, size, type (file or directory) and mod_time (epoch seconds).",
		InputSchema: inputSchema[listIn](map[string]any{"timeout": defaultTimeout, "max_entries": defaultMaxEntries}),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, s.listFiles)
	sdk.AddTool(s.mcp, &sdk.Tool{
		Name:        "file_exists",
		Description: "Tell whether a path exists in a sandbox.",
		InputSchema: inputSchema[existsIn](timeoutDefault),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
	}, s.fileExists)
	s.mcp.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "sandboxes",
		Title:       "Sandboxes of this session",
		Description: "The sandbox claim names this session created in a namespace, as a JSON array.",
		URITemplate: "sandboxes://{namespace}",
		MIMEType:    "application/json",
	}, s.readSandboxes)
}

func ptr[T any](v T) *T { return &v }

// namespace returns ns or the default, validated.
func (s *Server) namespace(ns string) (string, error) {
	if ns == "" {
		return s.cfg.Namespace, nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", fmt.Errorf("invalid namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	return ns, nil
}

// checkTimeout enforces 0 < t <= 600 and returns it as a duration.
func checkTimeout(name string, t float64) (time.Duration, error) {
	if !(t > 0 && t <= maxTimeout) {
		return 0, fmt.Errorf("%s must be greater than 0 and at most %d seconds, got %v", name, int(maxTimeout), t)
	}
	return time.Duration(t * float64(time.Second)), nil
}

// own returns the claim if it exists and belongs to the request's session;
// anything else reads as not found, so sessions cannot probe each other.
func (s *Server) own(ctx context.Context, ss *sdk.ServerSession, in claimIn) (string, *extv1beta1.SandboxClaim, error) {
	ns, err := s.namespace(in.Namespace)
	if err != nil {
		return "", nil, err
	}
	if in.SandboxClaimName == "" {
		return "", nil, errors.New("sandbox_claim_name is required")
	}
	sid, err := s.sessionID(ss)
	if err != nil {
		return "", nil, err
	}
	notFound := fmt.Errorf(sandboxNotFoundMessageForm, in.SandboxClaimName, ns)
	if len(validation.IsDNS1123Subdomain(in.SandboxClaimName)) > 0 {
		return "", nil, notFound
	}
	var claim extv1beta1.SandboxClaim
	err = s.kube.Get(ctx, types.NamespacedName{Namespace: ns, Name: in.SandboxClaimName}, &claim)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil, notFound
	case err != nil:
		return "", nil, fmt.Errorf("looking up sandbox claim '%s' in namespace '%s': %w", in.SandboxClaimName, ns, err)
	case claim.Labels[s.cfg.SessionLabelKey] != sid || claim.DeletionTimestamp != nil:
		return "", nil, notFound
	}
	return ns, &claim, nil
}

// attach returns a connected handle on an owned claim, reusing the one
// from earlier calls while it is connected.
func (s *Server) attach(ctx context.Context, ss *sdk.ServerSession, in claimIn) (*sandbox.Sandbox, error) {
	ns, claim, err := s.own(ctx, ss, in)
	if err != nil {
		return nil, err
	}
	t, err := remote.Resolve(ctx, s.kube, ns, claim.Name)
	if err != nil {
		return nil, err
	}
	if t.Sandbox == nil || !remote.IsReady(t.Sandbox) {
		state, reason := remote.State(t.Claim, t.Sandbox)
		if reason != "" {
			state += " (" + reason + ")"
		}
		return nil, fmt.Errorf("sandbox claim '%s' in namespace '%s' is not ready: %s", claim.Name, ns, state)
	}
	sb, err := remote.Attach(ctx, s.sdk, t)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.attached[sandbox.Key{Namespace: ns, ClaimName: claim.Name}] = sb
	s.mu.Unlock()
	return sb, nil
}

func (s *Server) createSandbox(ctx context.Context, req *sdk.CallToolRequest, in createIn) (*sdk.CallToolResult, createOut, error) {
	var out createOut
	ns, err := s.namespace(in.Namespace)
	if err != nil {
		return nil, out, err
	}
	if in.WarmPool == "" || len(validation.IsDNS1123Subdomain(in.WarmPool)) > 0 {
		return nil, out, fmt.Errorf("warmpool must name a SandboxWarmPool, got %q", in.WarmPool)
	}
	if !(in.SandboxReadyTimeout > 0) {
		return nil, out, fmt.Errorf("sandbox_ready_timeout must be greater than 0, got %v", in.SandboxReadyTimeout)
	}
	if in.ShutdownAfterSeconds <= 0 {
		return nil, out, fmt.Errorf("shutdown_after_seconds must be greater than 0, got %d", in.ShutdownAfterSeconds)
	}
	for what, m := range map[string]map[string]string{"labels": in.Labels, "pod_labels": in.PodLabels} {
		for k, v := range m {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				return nil, out, fmt.Errorf("%s %q=%q: %s", what, k, v, strings.Join(errs, "; "))
			}
		}
	}
	for k := range in.PodAnnotations {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return nil, out, fmt.Errorf("pod_annotations key %q: %s", k, strings.Join(errs, "; "))
		}
	}
	for k := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, out, fmt.Errorf("env name %q is not a valid environment variable name", k)
		}
	}
	if _, set := in.Labels[s.cfg.SessionLabelKey]; set {
		return nil, out, fmt.Errorf("labels must not set %s: the server sets it to the session id", s.cfg.SessionLabelKey)
	}
	sid, err := s.sessionID(req.Session)
	if err != nil {
		return nil, out, err
	}
	labels := maps.Clone(in.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[s.cfg.SessionLabelKey] = sid
	prog := newProgress(ctx, req)

	t, err := remote.Create(ctx, s.kube, remote.Spec{
		Namespace: ns, Pool: in.WarmPool, Labels: labels,
		PodLabels: in.PodLabels, PodAnnotations: in.PodAnnotations,
		ShutdownAfter: time.Duration(in.ShutdownAfterSeconds) * time.Second,
		Env:           sortedEnv(in.Env),
	})
	if err != nil {
		return nil, out, err
	}
	prog.send("claim " + t.Name() + " created")
	wctx, cancel := context.WithTimeout(ctx, time.Duration(in.SandboxReadyTimeout*float64(time.Second)))
	defer cancel()
	_, err = remote.WaitClaimReady(wctx, s.kube, ns, t.Claim.Name, func(name string) { prog.send("bound to sandbox " + name) })
	if err != nil {
		// Roll back: the caller never learns the name of a sandbox that
		// did not become ready.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		derr := remote.Delete(dctx, s.kube, t)
		if wctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("sandbox from warm pool '%s' was not ready within %v seconds", in.WarmPool, in.SandboxReadyTimeout)
		}
		return nil, out, errors.Join(err, derr)
	}
	prog.send("sandbox ready")
	out.SandboxClaimName = t.Claim.Name
	return nil, out, nil
}

func (s *Server) deleteSandbox(ctx context.Context, req *sdk.CallToolRequest, in claimIn) (*sdk.CallToolResult, deleteOut, error) {
	ns, claim, err := s.own(ctx, req.Session, in)
	if err != nil {
		return nil, deleteOut{}, err
	}
	key := sandbox.Key{Namespace: ns, ClaimName: claim.Name}
	s.mu.Lock()
	delete(s.attached, key)
	s.mu.Unlock()
	if err := s.sdk.DeleteSandbox(ctx, claim.Name, ns); err != nil {
		return nil, deleteOut{}, err
	}
	return nil, deleteOut{SandboxClaimName: claim.Name, Deleted: true}, nil
}

func (s *Server) executeCommand(ctx context.Context, req *sdk.CallToolRequest, in execIn) (*sdk.CallToolResult, execOut, error) {
	var out execOut
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, out, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, out, errors.New("command is empty")
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, out, err
	}
	prog := newProgress(ctx, req)
	stdout := newOutputBuffer(maxOutputBytes, prog, "stdout")
	stderr := newOutputBuffer(maxOutputBytes, prog, "stderr")
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := sb.Start(cctx, []string{"/bin/sh", "-c", in.Command}, &sandbox.ProcessOptions{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, out, fmt.Errorf("starting the command: %w", err)
	}
	_ = p.Stdin().Close()
	stopBeat := prog.heartbeat(p.Done())
	code, err := p.Wait()
	stopBeat()
	prog.flush()
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, out, fmt.Errorf("command did not finish within %v seconds and was killed", in.Timeout)
		}
		return nil, out, fmt.Errorf("running the command: %w", err)
	}
	out.ExitCode, out.Stdout, out.Stderr = code, stdout.String(), stderr.String()
	return nil, out, nil
}

func (s *Server) uploadFile(ctx context.Context, req *sdk.CallToolRequest, in uploadIn) (*sdk.CallToolResult, uploadOut, error) {
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, uploadOut{}, err
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, uploadOut{}, err
	}
	content := []byte(in.Content)
	if in.Binary {
		if content, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, uploadOut{}, fmt.Errorf("content is not valid base64: %w", err)
		}
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, uploadOut{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := remote.WriteFile(cctx, sb, p, content); err != nil {
		return nil, uploadOut{}, fmt.Errorf("writing %s: %w", in.Path, err)
	}
	return nil, uploadOut{BytesWritten: len(content)}, nil
}

func (s *Server) downloadFile(ctx context.Context, req *sdk.CallToolRequest, in downloadIn) (*sdk.CallToolResult, downloadOut, error) {
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, downloadOut{}, err
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, downloadOut{}, err
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, downloadOut{}, err
	}
	data, err := sb.Files().Read(ctx, p, sandbox.WithTimeout(timeout))
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, downloadOut{}, fmt.Errorf("file %s does not exist in the sandbox", in.Path)
		}
		return nil, downloadOut{}, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	if in.Binary {
		return nil, downloadOut{Content: base64.StdEncoding.EncodeToString(data), BytesRead: len(data)}, nil
	}
	if !utf8.Valid(data) {
		return nil, downloadOut{}, fmt.Errorf("file %s is not UTF-8 text; download it with binary=true", in.Path)
	}
	return nil, downloadOut{Content: string(data), BytesRead: len(data)}, nil
}

func (s *Server) listFiles(ctx context.Context, req *sdk.CallToolRequest, in listIn) (*sdk.CallToolResult, listOut, error) {
	var out listOut
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, out, err
	}
	if in.MaxEntries < 1 || in.MaxEntries > maxMaxEntries {
		return nil, out, fmt.Errorf("max_entries must be between 1 and %d, got %d", maxMaxEntries, in.MaxEntries)
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, out, err
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, out, err
	}
	entries, err := sb.Files().List(ctx, p, sandbox.WithTimeout(timeout))
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, out, fmt.Errorf("directory %s does not exist in the sandbox", in.Path)
		}
		return nil, out, fmt.Errorf("listing %s: %w", in.Path, err)
	}
	out.TotalEntries = len(entries)
	out.Entries = []entryOut{}
	for i, e := range entries {
		if i == in.MaxEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, entryOut{
			Name: e.Name, Size: e.Size, Type: string(e.Type),
			ModTime: float64(e.ModTime.UnixNano()) / 1e9,
		})
	}
	return nil, out, nil
}

func (s *Server) fileExists(ctx context.Context, req *sdk.CallToolRequest, in existsIn) (*sdk.CallToolResult, existsOut, error) {
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, existsOut{}, err
	}
	p, err := remote.CleanWorkspacePath(in.Path)
	if err != nil {
		return nil, existsOut{}, err
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, existsOut{}, err
	}
	ok, err := sb.Files().Exists(ctx, p, sandbox.WithTimeout(timeout))
	if err != nil {
		return nil, existsOut{}, fmt.Errorf("checking %s: %w", in.Path, err)
	}
	return nil, existsOut{Exists: ok}, nil
}

// readSandboxes serves sandboxes://{namespace}: this session's claims.
func (s *Server) readSandboxes(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	ns, err := s.namespace(strings.TrimPrefix(uri, "sandboxes://"))
	if err != nil || !strings.HasPrefix(uri, "sandboxes://") {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	sid, err := s.sessionID(req.Session)
	if err != nil {
		return nil, err
	}
	var claims extv1beta1.SandboxClaimList
	if err := s.kube.List(ctx, &claims, client.InNamespace(ns), client.MatchingLabels{s.cfg.SessionLabelKey: sid}); err != nil {
		return nil, fmt.Errorf("listing sandbox claims in %s: %w", ns, err)
	}
	names := []string{}
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	b, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

// progress sends notifications/progress for a request that asked for
// them (a progress token), and nothing otherwise.
type progress struct {
	ctx   context.Context
	req   *sdk.CallToolRequest
	token any
	began time.Time

	mu      sync.Mutex
	n       float64
	pending strings.Builder
	last    time.Time
}

func newProgress(ctx context.Context, req *sdk.CallToolRequest) *progress {
	p := &progress{ctx: ctx, req: req, began: time.Now()}
	if req != nil && req.Params != nil && req.Session != nil {
		p.token = req.Params.GetProgressToken()
	}
	return p
}

// send sends msg now.
func (p *progress) send(msg string) {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sendLocked(msg)
}

func (p *progress) sendLocked(msg string) {
	p.n++
	p.last = time.Now()
	if len(msg) > maxProgressMessage {
		msg = msg[len(msg)-maxProgressMessage:]
	}
	_ = p.req.Session.NotifyProgress(p.ctx, &sdk.ProgressNotificationParams{
		ProgressToken: p.token, Progress: p.n, Message: msg,
	})
}

// output records command output and sends it once progressInterval has
// passed since the last notification (the rest goes with flush or the
// next write).
func (p *progress) output(stream string, b []byte) {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if stream == "stderr" {
		p.pending.WriteString("[stderr] ")
	}
	p.pending.Write(b)
	if time.Since(p.last) >= progressInterval {
		p.flushLocked()
	}
}

func (p *progress) flush() {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
}

func (p *progress) flushLocked() {
	if p.pending.Len() == 0 {
		return
	}
	msg := strings.ToValidUTF8(p.pending.String(), "\uFFFD")
	p.pending.Reset()
	p.sendLocked(msg)
}

// heartbeat flushes pending output and, when the command is silent, says
// it is still running, until done is closed or stop is called.
func (p *progress) heartbeat(done <-chan struct{}) (stop func()) {
	if p.token == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-quit:
				return
			case <-t.C:
				p.mu.Lock()
				switch {
				case p.pending.Len() > 0:
					p.flushLocked()
				case time.Since(p.last) >= progressHeartbeat:
					p.sendLocked(fmt.Sprintf("running for %.0fs", time.Since(p.began).Seconds()))
				}
				p.mu.Unlock()
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

// outputBuffer keeps up to max bytes of one output stream and forwards
// everything to the progress notifications.
type outputBuffer struct {
	kept   *capbuf.Buffer
	prog   *progress
	stream string
}

func newOutputBuffer(max int, prog *progress, stream string) *outputBuffer {
	return &outputBuffer{kept: capbuf.New(max), prog: prog, stream: stream}
}

func (o *outputBuffer) Write(b []byte) (int, error) {
	_, _ = o.kept.Write(b)
	o.prog.output(o.stream, b)
	return len(b), nil
}

func (o *outputBuffer) String() string {
	s := o.kept.String()
	if o.kept.Truncated() {
		s += fmt.Sprintf("\n[output truncated at %d bytes]", o.kept.Max())
	}
	return s
}

// sortedEnv turns the tool's env map into claim env in name order, so the
// same arguments always make the same claim.
func sortedEnv(m map[string]string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, corev1.EnvVar{Name: k, Value: m[k]})
	}
	return out
}

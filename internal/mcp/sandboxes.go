package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
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
	notFound := fmt.Errorf(sandboxNotFoundMessageForm, in.SandboxClaimName, ns) //nolint:staticcheck // ST1005: the reference's MCP server returns this exact sentence, full stop included
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

// sortedEnv turns the tool's env map into claim env in name order, so the
// same arguments always make the same claim.
func sortedEnv(m map[string]string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, corev1.EnvVar{Name: k, Value: m[k]})
	}
	return out
}

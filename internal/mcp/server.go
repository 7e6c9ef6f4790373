// Package mcp is agent-sandbox's MCP server (`agent-sandbox mcp`): it
// gives agent frameworks the tools of the upstream k8s-agent-sandbox MCP
// server — create_sandbox, delete_sandbox, execute_command, upload_file,
// download_file, list_files and file_exists — with the same arguments and
// limits, and the resource sandboxes://{namespace}, over stdio or
// streamable HTTP, built on the official Go MCP SDK.
//
// Sessions are isolated: every claim a session creates carries the label
// Config.SessionLabelKey=<session id>, and every other tool refuses claims
// without this session's label with the same message a missing claim gets,
// so a session can neither use nor detect another session's sandboxes.
// The session id is the streamable HTTP session (Mcp-Session-Id); a stdio
// connection is one session with an id generated when it starts.
//
// Commands run through the sandbox's process API and execute_command
// streams their output as progress notifications when the client asks for
// progress; files move through the runtime's file API (nested uploads
// through the process API). The connection strategy is the Go SDK's
// (router port-forward, router URL or Gateway).
package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// DefaultSessionLabelKey is the claim label holding the MCP session id,
// as in the upstream server (K8S_SANDBOX_SESSION_ID_LABEL_KEY).
const DefaultSessionLabelKey = "mcp.k8s-agent-sandbox/session-id"

// ServerName is the implementation name the server reports.
const ServerName = "K8sAgentSandbox"

// Config configures a Server.
type Config struct {
	// Options are the Go SDK options every sandbox is reached with: the
	// connection strategy (APIURL, GatewayName, ...) and the Kubernetes
	// clients. K8sHelper is required.
	Options sandbox.Options
	// Namespace is used when a tool call names none (default "default").
	Namespace string
	// SessionLabelKey is the claim label holding the session id (default
	// DefaultSessionLabelKey).
	SessionLabelKey string
	// Version is reported to clients.
	Version string
	// Logger receives the MCP SDK's logs; nil discards them.
	Logger *slog.Logger
	// DefaultShutdownAfter is create_sandbox's shutdown_after_seconds when
	// a call gives none (default 300 s, the published server's): sandboxes
	// an agent forgets to delete go away on their own.
	DefaultShutdownAfter time.Duration
}

// Server is the MCP server. It is safe for concurrent sessions.
type Server struct {
	cfg  Config
	kube client.WithWatch
	sdk  *sandbox.Client
	mcp  *sdk.Server

	mu       sync.Mutex
	ids      map[*sdk.ServerSession]string // generated ids of sessions without one
	attached map[sandbox.Key]*sandbox.Sandbox
}

// New builds a Server.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Options.K8sHelper == nil {
		return nil, errors.New("mcp: Config.Options.K8sHelper is required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.SessionLabelKey == "" {
		cfg.SessionLabelKey = DefaultSessionLabelKey
	}
	if errs := validation.IsQualifiedName(cfg.SessionLabelKey); len(errs) > 0 {
		return nil, fmt.Errorf("mcp: session label key %q: %v", cfg.SessionLabelKey, errs)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.DefaultShutdownAfter == 0 {
		cfg.DefaultShutdownAfter = defaultShutdownAfter * time.Second
	}
	if cfg.DefaultShutdownAfter < time.Second {
		return nil, fmt.Errorf("mcp: default shutdown-after %s must be at least 1s: every sandbox gets a lifetime", cfg.DefaultShutdownAfter)
	}
	cl, err := sandbox.NewClient(ctx, cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("mcp: sandbox client: %w", err)
	}
	s := &Server{
		cfg:      cfg,
		kube:     cfg.Options.K8sHelper.ExtensionsClient,
		sdk:      cl,
		ids:      map[*sdk.ServerSession]string{},
		attached: map[sandbox.Key]*sandbox.Sandbox{},
	}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: ServerName, Title: "agent-sandbox", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: "Tools to create isolated Kubernetes sandboxes (from a SandboxWarmPool), run commands " +
			"and move files in them, and delete them. A session only sees the sandboxes it created.",
		Logger:                    cfg.Logger,
		SupportedProtocolVersions: sessionfulVersions(),
		Capabilities:              &sdk.ServerCapabilities{},
	})
	s.addTools()
	return s, nil
}

// sessionfulVersions are the protocol versions with sessions. From
// 2026-07-28 streamable HTTP requests carry no session, and isolation
// needs one: clients of that version negotiate down to the newest
// session-based version instead.
func sessionfulVersions() []string {
	var out []string
	for _, v := range sdk.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			out = append(out, v)
		}
	}
	return out
}

// MCPServer is the underlying MCP SDK server.
func (s *Server) MCPServer() *sdk.Server { return s.mcp }

// Run serves one session over t (e.g. &sdk.StdioTransport{}) until the
// client disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	return s.mcp.Run(ctx, t)
}

// HTTPHandler serves streamable HTTP; each MCP session is a session of
// this server. Idle sessions end after idle (0: never).
func (s *Server) HTTPHandler(idle time.Duration) http.Handler {
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{Logger: s.cfg.Logger, SessionTimeout: idle})
}

// Close disconnects from every sandbox the server attached to. Sandboxes
// are not deleted: they expire by their shutdown time.
func (s *Server) Close(ctx context.Context) {
	s.mu.Lock()
	handles := make([]*sandbox.Sandbox, 0, len(s.attached))
	for _, sb := range s.attached {
		handles = append(handles, sb)
	}
	s.attached = map[sandbox.Key]*sandbox.Sandbox{}
	s.mu.Unlock()
	for _, sb := range handles {
		_ = sb.Disconnect(ctx)
	}
}

// sessionID returns the id that labels the session's claims: the
// transport's session id (hashed if it is not a valid label value), or,
// for a transport without ids (stdio, where the connection is the
// session), one generated for this session.
func (s *Server) sessionID(ss *sdk.ServerSession) (string, error) {
	if ss == nil {
		return "", errors.New("this request has no MCP session; per-session isolation needs one")
	}
	if id := ss.ID(); id != "" {
		if len(validation.IsValidLabelValue(id)) == 0 {
			return id, nil
		}
		sum := sha256.Sum256([]byte(id))
		return hex.EncodeToString(sum[:16]), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.ids[ss]; ok {
		return id, nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generating a session id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	s.ids[ss] = id
	go func() {
		// Forget the session once it ends.
		_ = ss.Wait()
		s.mu.Lock()
		delete(s.ids, ss)
		s.mu.Unlock()
	}()
	return id, nil
}

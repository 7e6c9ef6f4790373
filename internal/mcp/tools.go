package mcp

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/util/validation"
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

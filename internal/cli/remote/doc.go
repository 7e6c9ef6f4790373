// Package remote holds the sandbox operations shared by the agent-sandbox
// CLI commands and its MCP server: resolving the name a user typed to a
// SandboxClaim and/or Sandbox, computing a display state, creating claims
// and template sandboxes, waiting on them with watches, attaching through
// the Go SDK (clients/go/sandbox) and moving files with tar streams over
// the sandbox's process API.
//
// Everything that reaches into a sandbox goes through the SDK's connection
// strategies (router port-forward tunnel by default, a router URL, or a
// Gateway); only Kubernetes objects are read and written directly.
package remote

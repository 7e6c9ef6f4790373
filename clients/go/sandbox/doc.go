// Package sandbox is the Go client of agent-sandbox: it claims a sandbox
// from a SandboxWarmPool, waits for it to become Ready, runs commands in it
// and moves files in and out, through the sandbox-router or straight to the
// sandbox pod.
//
// # Lifecycle
//
// A [Sandbox] handle is created with [New] (which only validates options)
// and provisioned with [Sandbox.Open]: Open creates a SandboxClaim
// (extensions.agents.x-k8s.io/v1beta1) referencing Options.WarmPoolName,
// watches the claim until the controller binds a Sandbox to it, makes sure
// that Sandbox's Ready condition is True, and connects. Both waits are
// driven by watches, not polling, and what does not depend on the answer
// runs alongside them: the claim watch starts from the create response,
// a watch on the Sandboxes labelled with the claim's UID usually holds the
// bound Sandbox (Ready) by the time the claim names it, and the connection
// through the router is set up while the claim is bound. [Sandbox.Close]
// deletes the claim (and with it the Sandbox and its Pod);
// [Sandbox.Disconnect] only drops the connection, and a later Open
// re-attaches to the same sandbox. [Client] keeps a registry of handles
// keyed by claim for programs that manage many sandboxes. [Attach] (and
// [Client.AttachSandbox]) reaches a Sandbox that was created without a
// claim, by name, and never deletes it.
//
// # Connections
//
// How requests reach the sandbox is chosen from the options, first match
// wins:
//
//   - Options.APIURL: requests go to that URL (normally the sandbox-router,
//     e.g. a port you forwarded yourself, or an in-cluster Service URL),
//     with the router's X-Sandbox-* headers.
//   - Options.Connectivity = ConnectivityInCluster: requests go straight to
//     the sandbox Pod's IP; this process must be able to route to Pod IPs.
//   - Options.Runtime = RuntimeSandboxd: a port-forward to the sandbox Pod's
//     sandboxd ports, through the Kubernetes API server.
//   - Options.GatewayName: the address of that Gateway
//     (gateway.networking.k8s.io/v1), which fronts the sandbox-router.
//   - otherwise (the default): a port-forward through the Kubernetes API
//     server to a ready Pod behind the sandbox-router-svc Service, in
//     Options.RouterNamespace, else in the sandbox's namespace, else in
//     agent-sandbox-system.
//
// Connections through the router do not depend on the sandbox, so the
// handles of one [Client] (one [K8sHelper]) share them: one port-forward
// tunnel, kept open for a while after its last handle closes, and one pool
// of keep-alive HTTP connections.
//
// Redirects are never followed, and Gateway addresses are validated before
// use, so a compromised router or Gateway status cannot point the client at
// another host.
//
// # Runtimes
//
// Two in-sandbox APIs are spoken. [RuntimeLegacyPython] (the default) is the
// python-runtime API on port 8888: POST /execute, POST /upload,
// GET /download|/list|/exists/{path}. [RuntimeSandboxd] is sandboxd's REST
// files API (/v1/files/{path} on port 8080) plus its gRPC process service
// (port 9090). agent-sandbox's sandboxd serves both, so either works against
// it.
//
// # Requests
//
// Every call has a deadline (Options.RequestTimeout unless the caller's
// context has one, or [WithTimeout]), a request id sent as X-Request-ID
// that stays the same across retries, and bounded retries of transport
// errors and 500/502/503/504 answers (file operations: 6 attempts; Run: 1,
// because a command may not be safe to repeat; see [WithMaxAttempts]).
// Errors are typed: [ErrNotReady], [ErrTimeout], [ErrNotFound],
// [ErrRetriesExhausted], and [*HTTPError] / [*RPCError] carrying the
// sandbox's own error detail.
//
// # Streaming processes
//
// [Sandbox.Start] is an extension over the published SDK: it starts a
// process through sandboxd's gRPC process API and streams its output while
// the caller feeds stdin and sends signals.
package sandbox

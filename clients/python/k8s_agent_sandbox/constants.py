"""Names of the Kubernetes objects, labels and annotations the SDK reads and writes."""

from __future__ import annotations

# SandboxClaim (extensions.agents.x-k8s.io/v1beta1).
CLAIM_API_GROUP = "extensions.agents.x-k8s.io"
CLAIM_API_VERSION = "v1beta1"
CLAIM_PLURAL = "sandboxclaims"
CLAIM_KIND = "SandboxClaim"
CLAIM_NAME_PREFIX = "sandbox-claim-"

# Sandbox (agents.x-k8s.io/v1beta1).
SANDBOX_API_GROUP = "agents.x-k8s.io"
SANDBOX_API_VERSION = "v1beta1"
SANDBOX_PLURAL = "sandboxes"

# Gateway API, used by SandboxGatewayConnectionConfig.
GATEWAY_API_GROUP = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = "v1"
GATEWAY_PLURAL = "gateways"

# Labels and annotations.
CREATED_BY_LABEL = "agents.x-k8s.io/created-by"
CREATED_BY_VALUE = "python-client"
POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
SANDBOX_NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash"
CLIENT_REQUESTED_AT_ANNOTATION = "agents.x-k8s.io/client-first-requested-at"
TRACE_CONTEXT_ANNOTATION = "opentelemetry.io/trace-context"

# The router Service the local tunnel forwards to.
ROUTER_SERVICE_NAME = "sandbox-router-svc"
ROUTER_SERVICE_PORT = 8080
DEFAULT_ROUTER_NAMESPACE = "agent-sandbox-system"

# Routing headers understood by sandbox-router.
HEADER_SANDBOX_ID = "X-Sandbox-ID"
HEADER_SANDBOX_NAMESPACE = "X-Sandbox-Namespace"
HEADER_SANDBOX_PORT = "X-Sandbox-Port"
HEADER_SANDBOX_POD_IP = "X-Sandbox-Pod-IP"
HEADER_SANDBOX_TIMEOUT = "X-Sandbox-Timeout"

# Claim condition reasons the readiness wait reacts to.
REASON_TEMPLATE_NOT_FOUND = "TemplateNotFound"
REASON_WARM_POOL_NOT_FOUND = "WarmPoolNotFound"
TERMINAL_CLAIM_REASONS = frozenset(
    {
        "InvalidMetadata",
        "EnvVarsInjectionRejected",
        "VolumeClaimTemplatesError",
        "ClaimExpired",
        "SandboxExpired",
    }
)

# Sandbox.status() states.
STATE_READY = "SandboxReady"
STATE_NOT_READY = "SandboxNotReady"
STATE_NOT_FOUND = "SandboxNotFound"

DEFAULT_NAMESPACE = "default"
DEFAULT_SERVER_PORT = 8888
DEFAULT_SANDBOX_READY_TIMEOUT = 180
DEFAULT_REQUEST_TIMEOUT = 60

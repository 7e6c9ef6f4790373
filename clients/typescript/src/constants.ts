// Names of the Kubernetes objects, labels, annotations and headers the SDK
// reads and writes. They match the Python and Go SDKs so the three clients
// leave identical objects on the apiserver.

export const CLAIM_API_GROUP = "extensions.agents.x-k8s.io";
export const CLAIM_API_VERSION = "v1beta1";
export const CLAIM_PLURAL = "sandboxclaims";
export const CLAIM_KIND = "SandboxClaim";
export const CLAIM_NAME_PREFIX = "sandbox-claim-";

export const SANDBOX_API_GROUP = "agents.x-k8s.io";
export const SANDBOX_API_VERSION = "v1beta1";
export const SANDBOX_PLURAL = "sandboxes";

export const GATEWAY_API_GROUP = "gateway.networking.k8s.io";
export const GATEWAY_API_VERSION = "v1";
export const GATEWAY_PLURAL = "gateways";

export const CREATED_BY_LABEL = "agents.x-k8s.io/created-by";
export const CREATED_BY_VALUE = "typescript-client";
export const POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name";
export const SANDBOX_NAME_HASH_LABEL = "agents.x-k8s.io/sandbox-name-hash";
export const CLIENT_REQUESTED_AT_ANNOTATION = "agents.x-k8s.io/client-first-requested-at";

export const ROUTER_SERVICE_NAME = "sandbox-router-svc";
export const ROUTER_SERVICE_PORT = 8080;
export const DEFAULT_ROUTER_NAMESPACE = "agent-sandbox-system";

export const HEADER_SANDBOX_ID = "X-Sandbox-ID";
export const HEADER_SANDBOX_NAMESPACE = "X-Sandbox-Namespace";
export const HEADER_SANDBOX_PORT = "X-Sandbox-Port";
export const HEADER_SANDBOX_POD_IP = "X-Sandbox-Pod-IP";
export const HEADER_SANDBOX_TIMEOUT = "X-Sandbox-Timeout";

export const REASON_TEMPLATE_NOT_FOUND = "TemplateNotFound";
export const REASON_WARM_POOL_NOT_FOUND = "WarmPoolNotFound";
export const TERMINAL_CLAIM_REASONS: ReadonlySet<string> = new Set([
  "InvalidMetadata",
  "EnvVarsInjectionRejected",
  "VolumeClaimTemplatesError",
  "ClaimExpired",
  "SandboxExpired",
]);

export const STATE_READY = "SandboxReady";
export const STATE_NOT_READY = "SandboxNotReady";
export const STATE_NOT_FOUND = "SandboxNotFound";

export const DEFAULT_NAMESPACE = "default";
export const DEFAULT_SERVER_PORT = 8888;
export const DEFAULT_GRPC_PORT = 9090;
export const DEFAULT_SANDBOX_READY_TIMEOUT_SECONDS = 180;
export const DEFAULT_REQUEST_TIMEOUT_SECONDS = 60;

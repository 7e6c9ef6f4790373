package claim

// Least-privilege RBAC for the claim controller (generated into
// k8s/rbac/extensions by `make generate`).
//
// +kubebuilder:rbac:groups=extensions.agents.x-k8s.io,resources=sandboxclaims,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=extensions.agents.x-k8s.io,resources=sandboxclaims/status;sandboxclaims/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=extensions.agents.x-k8s.io,resources=sandboxwarmpools;sandboxtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.x-k8s.io,resources=sandboxes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch
//
// Secrets are deliberately not granted here: env valueFrom.secretKeyRef
// (env.go) needs get on secrets in the namespaces that use it, which an
// operator grants with a namespaced RoleBinding (docs/security.md,
// late-binding). Without it such claims are refused with a clear reason.

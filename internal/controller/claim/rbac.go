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
// Secrets: get only, and only through the uncached API reader (no Secret
// informer, so the controller never holds every Secret in memory). It
// reads a Secret only when a claim's env names it with valueFrom, and uses
// it only if the Secret opts in (extv1beta1.ClaimEnvAllowedAnnotation).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

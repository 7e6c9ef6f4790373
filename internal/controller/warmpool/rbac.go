package warmpool

// Least-privilege RBAC for the warm pool controller (generated into
// k8s/rbac/extensions by `make generate`).
//
// +kubebuilder:rbac:groups=extensions.agents.x-k8s.io,resources=sandboxwarmpools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=extensions.agents.x-k8s.io,resources=sandboxwarmpools/status;sandboxwarmpools/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=extensions.agents.x-k8s.io,resources=sandboxtemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=agents.x-k8s.io,resources=sandboxes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch

package warmpool

import (
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// injectDeliveryKey makes a member the pool is about to create trust this
// controller's late-binding key (latebind.InjectKey), so that claims with
// env stay on the warm path for a plain template: no operator has to copy
// the public key into the template. The key is the one member vetting
// compares with (the shared Registry's), so a member is either exactly this
// rendering or not a member. sb was rendered from ti.
func (r *Reconciler) injectDeliveryKey(sb *sandboxv1beta1.Sandbox, ti *templateInfo) {
	latebind.InjectKey(ti.tmpl.Spec.EnvVarsInjectionPolicy, &sb.Spec.PodTemplate.Spec, r.vetted.DeliveryKey())
}

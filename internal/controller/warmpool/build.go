package warmpool

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// templateInfo is what a pass knows about the pool's template.
type templateInfo struct {
	tmpl            *extv1beta1.SandboxTemplate
	blueprintHash   string
	podTemplateHash string
}

func newTemplateInfo(tmpl *extv1beta1.SandboxTemplate) *templateInfo {
	h := blueprint.HashesOf(tmpl)
	return &templateInfo{tmpl: tmpl, blueprintHash: h.Blueprint, podTemplateHash: h.PodTemplate}
}

// buildSandbox renders the Sandbox a pool creates: the blueprint
// renderer's member of the pool (internal/blueprint: secure defaults,
// member labels, the template hashes that later decide staleness, the
// eviction mark), named after the pool and controlled by it.
//
// deliveryKey is this controller's late-binding key (the shared vetting
// Registry's, the one member vetting compares with), injected so that
// claims with env stay on the warm path for a plain template: no operator
// has to copy the public key into the template. A member is either
// exactly this rendering or not a member. One object is built per
// reconcile and deep-copied per create.
func buildSandbox(pool *extv1beta1.SandboxWarmPool, ti *templateInfo, enableEviction bool, deliveryKey string) *sandboxv1beta1.Sandbox {
	sb := blueprint.ForPool(ti.tmpl, blueprint.Pool{
		Name:        pool.Name,
		Hashes:      blueprint.Hashes{Blueprint: ti.blueprintHash, PodTemplate: ti.podTemplateHash},
		SafeToEvict: enableEviction,
		DeliveryKey: deliveryKey,
	})
	sb.GenerateName = pool.Name + "-"
	sb.Namespace = pool.Namespace
	sb.OwnerReferences = []metav1.OwnerReference{ownerref.WarmPool(pool)}
	return sb
}

package blueprint

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// ControllerAppLabel is the app label value of the controller pods.
const ControllerAppLabel = "agent-sandbox-controller"

// lateBindingIngress is the ingress rule the secure default policy adds for
// a template that allows claim env: the controller's pods (in the router's
// namespace, the platform's) may reach sandboxd's REST port, where it
// delivers late-bound env (internal/latebind). Without it, a cluster that
// enforces NetworkPolicy would keep every env claim of such a template
// waiting for a delivery that cannot arrive. Templates that refuse env keep
// the published secure default exactly; templates with their own rules
// must admit the controller themselves (docs/security.md, late-binding).
func lateBindingIngress(tmpl *extv1beta1.SandboxTemplate) []networkingv1.NetworkPolicyIngressRule {
	switch tmpl.Spec.EnvVarsInjectionPolicy {
	case extv1beta1.EnvVarsInjectionPolicyAllowed, extv1beta1.EnvVarsInjectionPolicyOverrides:
	default:
		return nil
	}
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(latebind.DefaultPort)
	return []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
		From: []networkingv1.NetworkPolicyPeer{{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": ControllerAppLabel}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": RouterNamespace}},
		}},
	}}
}

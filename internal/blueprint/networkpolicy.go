package blueprint

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

const (
	// RouterNamespace is where the sandbox-router runs; the secure default
	// policy admits ingress only from its pods.
	RouterNamespace = "agent-sandbox-system"
	// RouterAppLabel is the app label value of the sandbox-router pods.
	RouterAppLabel = "sandbox-router"
)

// privateIPv4 and privateIPv6 are the ranges the secure default policy keeps
// sandboxes away from: RFC 1918, link-local (cloud metadata at
// 169.254.169.254), IPv6 unique-local and link-local.
var (
	privateIPv4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}
	privateIPv6 = []string{"fc00::/7", "fe80::/10"}
)

// NetworkPolicyName is the name of the shared policy of a template.
func NetworkPolicyName(templateName string) string {
	return templateName + "-network-policy"
}

// NetworkPolicySpec returns the policy spec for tmpl: the secure
// default when the template sets no rules, else the template's rules
// verbatim. Pod selector and policy types are always the controller's, so a
// template cannot widen the policy to other pods or drop a direction.
func NetworkPolicySpec(tmpl *extv1beta1.SandboxTemplate) networkingv1.NetworkPolicySpec {
	spec := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
			labels.SandboxTemplateRefHash: labels.NameHash(tmpl.Name),
		}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
	if custom := tmpl.Spec.NetworkPolicy; custom != nil {
		for i := range custom.Ingress {
			spec.Ingress = append(spec.Ingress, *custom.Ingress[i].DeepCopy())
		}
		for i := range custom.Egress {
			spec.Egress = append(spec.Egress, *custom.Egress[i].DeepCopy())
		}
		return spec
	}
	spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": RouterAppLabel}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": RouterNamespace}},
		}},
	}}
	spec.Ingress = append(spec.Ingress, lateBindingIngress(tmpl)...)
	spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: append([]string(nil), privateIPv4...)}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: append([]string(nil), privateIPv6...)}},
		},
	}}
	return spec
}

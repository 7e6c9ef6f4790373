package blueprint

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func TestSecureDefaultNetworkPolicy(t *testing.T) {
	tmpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "python"}}
	got := NetworkPolicySpec(tmpl)
	want := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labels.SandboxTemplateRefHash: labels.NameHash("python")}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sandbox-router"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "agent-sandbox-system"}},
		}}}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: []string{"fc00::/7", "fe80::/10"}}},
		}}},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("secure default policy:\n got %+v\nwant %+v", got, want)
	}
	if NetworkPolicyName("python") != "python-network-policy" {
		t.Errorf("policy name = %q", NetworkPolicyName("python"))
	}
}

func TestCustomNetworkPolicyKeepsSelectorAndTypes(t *testing.T) {
	port := intstr.FromInt32(8080)
	tmpl := &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Spec: extv1beta1.SandboxTemplateSpec{NetworkPolicy: &extv1beta1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
			Egress:  []networkingv1.NetworkPolicyEgressRule{}, // empty: deny all egress
		}},
	}
	got := NetworkPolicySpec(tmpl)
	if got.PodSelector.MatchLabels[labels.SandboxTemplateRefHash] != labels.NameHash("t") || len(got.PolicyTypes) != 2 {
		t.Fatalf("selector/types not the controller's: %+v", got)
	}
	if len(got.Ingress) != 1 || got.Ingress[0].Ports[0].Port.IntVal != 8080 {
		t.Errorf("ingress not verbatim: %+v", got.Ingress)
	}
	if len(got.Egress) != 0 {
		t.Errorf("an empty egress list must deny all egress, got %+v", got.Egress)
	}
	// The template's slice must not be shared with the policy.
	got.Ingress[0].Ports = nil
	if tmpl.Spec.NetworkPolicy.Ingress[0].Ports == nil {
		t.Error("NetworkPolicySpec aliases the template's rules")
	}
}

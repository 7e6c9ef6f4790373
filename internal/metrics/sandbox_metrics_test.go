package metrics

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func TestSandboxLabels(t *testing.T) {
	yes := true
	owned := func(apiVersion, kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "u", Controller: &yes}}
	}
	cases := []struct {
		name string
		sb   sandboxv1beta1.Sandbox
		want [7]string
	}{
		{"bare, no status", sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}},
			[7]string{"ns", "false", "false", "cold", "unknown", "None", "unknown"}},
		{"ready warm claim-owned python", sandboxv1beta1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns",
				Labels:          map[string]string{labels.LaunchType: "warm", labels.CreatedBy: "python-client"},
				Annotations:     map[string]string{labels.SandboxTemplateRef: "py"},
				OwnerReferences: owned("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim")},
			Status: sandboxv1beta1.SandboxStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "DependenciesReady"}}},
		}, [7]string{"ns", "true", "false", "warm", "py", "SandboxClaim", "python-client"}},
		{"expired, v1alpha1 pool owner, untrusted creator", sandboxv1beta1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns",
				Labels:          map[string]string{labels.LaunchType: "cold", labels.CreatedBy: "me"},
				OwnerReferences: owned("extensions.agents.x-k8s.io/v1alpha1", "SandboxWarmPool")},
			Status: sandboxv1beta1.SandboxStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: "False", Reason: "SandboxExpired"}}},
		}, [7]string{"ns", "false", "true", "cold", "unknown", "SandboxWarmPool", "unknown"}},
		{"owner of another group", sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: "ns",
			Annotations: map[string]string{labels.PodName: "x"}, OwnerReferences: owned("apps/v1", "SandboxClaim")}},
			[7]string{"ns", "false", "false", "cold", "unknown", "None", "unknown"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := sandboxLabels(&tc.sb); got != tc.want {
				t.Errorf("labels = %v, want %v", got, tc.want)
			}
		})
	}
}

package ownerref

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func TestReferencesNameTheOwnerByUIDAsController(t *testing.T) {
	yes := true
	meta := metav1.ObjectMeta{Name: "owner", Namespace: "ns", UID: types.UID("1234")}
	want := func(apiVersion, kind string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "1234", Controller: &yes, BlockOwnerDeletion: &yes}
	}
	cases := []struct {
		name      string
		got, want metav1.OwnerReference
	}{
		{"sandbox", Sandbox(&sandboxv1beta1.Sandbox{ObjectMeta: meta}), want("agents.x-k8s.io/v1beta1", "Sandbox")},
		{"claim", Claim(&extv1beta1.SandboxClaim{ObjectMeta: meta}), want("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim")},
		{"warm pool", WarmPool(&extv1beta1.SandboxWarmPool{ObjectMeta: meta}), want("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool")},
		{"template", Template(&extv1beta1.SandboxTemplate{ObjectMeta: meta}), want("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !equality.Semantic.DeepEqual(c.got, c.want) {
				t.Fatalf("got %+v, want %+v", c.got, c.want)
			}
			// The reference is what metav1 recognises as the controller.
			child := &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{c.got}}
			if ctl := metav1.GetControllerOfNoCopy(child); ctl == nil || ctl.UID != "1234" {
				t.Fatalf("not a controller reference: %+v", ctl)
			}
		})
	}
}

package warmpool

import (
	"testing"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// Every field is sent, zeros included, so that counts going back to zero
// are written too.
func TestStatusPatchBytes(t *testing.T) {
	cases := []struct {
		name string
		st   extv1beta1.SandboxWarmPoolStatus
		want string
	}{
		{"zero", extv1beta1.SandboxWarmPoolStatus{}, `{"status":{"observedGeneration":0,"readyReplicas":0,"replicas":0,"selector":""}}`},
		{"set", extv1beta1.SandboxWarmPoolStatus{Replicas: 3, ReadyReplicas: 2, Selector: "k=v", ObservedGeneration: 9},
			`{"status":{"observedGeneration":9,"readyReplicas":2,"replicas":3,"selector":"k=v"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := statusPatch(c.st).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

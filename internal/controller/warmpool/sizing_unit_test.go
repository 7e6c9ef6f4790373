package warmpool

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// TestSizingStatus is the apiserver-free half of TestPoolSizing: the size a
// pool aims at (spec.replicas, 1 when unset) and the status it reports for a
// given count, the selector the scale subresource hands to an HPA included.
func TestSizingStatus(t *testing.T) {
	cases := []struct {
		name           string
		replicas       *int32
		current, ready int
		wantDesired    int32
	}{
		{"unset replicas means 1", nil, 0, 0, 1},
		{"explicit zero stays zero", ptr.To[int32](0), 2, 1, 0},
		{"steady", ptr.To[int32](4), 4, 4, 4},
		{"excess still reported as counted", ptr.To[int32](2), 5, 3, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := &extv1beta1.SandboxWarmPool{
				ObjectMeta: metav1.ObjectMeta{Name: "pool-" + c.name, Namespace: "ns", Generation: 7},
				Spec:       extv1beta1.SandboxWarmPoolSpec{Replicas: c.replicas},
			}
			if got := pool.DesiredReplicas(); got != c.wantDesired {
				t.Fatalf("DesiredReplicas = %d, want %d", got, c.wantDesired)
			}
			want := extv1beta1.SandboxWarmPoolStatus{
				Replicas:           int32(c.current),
				ReadyReplicas:      int32(c.ready),
				Selector:           labels.WarmPoolSandbox + "=" + labels.NameHash(pool.Name),
				ObservedGeneration: 7,
			}
			if got := computeStatus(pool, c.current, c.ready); got != want {
				t.Fatalf("computeStatus = %+v, want %+v", got, want)
			}
		})
	}
}

package sandbox

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
)

// A node-store snapshot can only be restored on its node, so the Pod is
// pinned there; a snapshot on the Sandbox's volume goes wherever the volume
// can be mounted (the scheduler and the volume's own node affinity decide).
func TestRestoreIntoPodPinsOnlyNodeStoreSnapshots(t *testing.T) {
	r := &Reconciler{Options: Options{DeepHibernation: true}}
	for _, tc := range []struct {
		snap     sandboxv1beta1.MemorySnapshot
		wantNode string
		wantRef  string
	}{
		{sandboxv1beta1.MemorySnapshot{ID: "uid", NodeName: "n1"}, "n1", "uid"},
		{sandboxv1beta1.MemorySnapshot{ID: "uid", NodeName: "n1", Volume: "data", VolumePath: "/v", Digest: "sha256:ab"}, "",
			"uid;digest=sha256:ab;volume=/v"},
	} {
		sb := &sandboxv1beta1.Sandbox{}
		snap := tc.snap
		sb.Status.MemorySnapshot = &snap
		pod := &corev1.Pod{}
		r.restoreIntoPod(sb, pod)
		if pod.Spec.NodeName != tc.wantNode || pod.Annotations[hibernate.AnnotationRestoreSnapshot] != tc.wantRef {
			t.Errorf("snapshot %+v: node %q, ref %q; want %q, %q", tc.snap, pod.Spec.NodeName, pod.Annotations[hibernate.AnnotationRestoreSnapshot], tc.wantNode, tc.wantRef)
		}
		if !restoresFrom(pod, &snap) {
			t.Errorf("restoresFrom does not recognise the Pod's own reference %q", pod.Annotations[hibernate.AnnotationRestoreSnapshot])
		}
	}
}

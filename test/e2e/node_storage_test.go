package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// TestDefaultStorageClassProvisionsVolumeClaimTemplates: a Sandbox whose
// volumeClaimTemplates name no StorageClass gets a PVC that the default
// class (local-path) binds with no manual step; data written survives
// suspend and resume; deleting the Sandbox's claim deletes the volume and
// its directory under the cluster's state dir (so `down --purge` takes
// the data with it).
func TestDefaultStorageClassProvisionsVolumeClaimTemplates(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "e2e-dynamic-pvc"
	pvcName := "data-" + name
	sb := webSandbox(name, "gvisor", "([ -f /data/marker ] || date +%s%N > /data/marker) && cp /data/marker /www/index.html")
	sb.Spec.PodTemplate.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	sb.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{{
		EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}}
	if err := c.Create(ctx, sb); err != nil {
		t.Fatal(err)
	}
	pvcs := clientset.CoreV1().PersistentVolumeClaims(metav1.NamespaceDefault)
	defer func() {
		deleteSandbox(t, c, name)
		_ = pvcs.Delete(context.Background(), pvcName, metav1.DeleteOptions{})
	}()
	first := waitSandboxReady(t, c, name)
	marker := strings.TrimSpace(httpGet(ctx, t, fmt.Sprintf("http://%s:8080/", first.Status.PodIPs[0])))
	if marker == "" {
		t.Fatal("no marker written")
	}
	pvc, err := pvcs.Get(ctx, pvcName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != localcluster.LocalPathStorageClass {
		t.Fatalf("PVC %s: phase %s, class %v; want Bound by %s", pvcName, pvc.Status.Phase, pvc.Spec.StorageClassName, localcluster.LocalPathStorageClass)
	}
	pv, err := clientset.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := pvHostDir(pv)
	state := cluster.Config().StateDir
	if !strings.HasPrefix(dir, state+string(filepath.Separator)) {
		t.Errorf("volume directory %q is outside the state dir %s", dir, state)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "marker")); err != nil || strings.TrimSpace(string(data)) != marker {
		t.Errorf("marker on the host: %q, %v; want %q", data, err, marker)
	}

	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeSuspended)
	waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})
	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
	second := waitSandboxReady(t, c, name)
	if again := strings.TrimSpace(httpGet(ctx, t, fmt.Sprintf("http://%s:8080/", second.Status.PodIPs[0]))); again != marker {
		t.Errorf("data lost across suspend/resume: %q then %q", marker, again)
	}

	// Reclaim policy Delete: the provisioner's teardown pod removes the data.
	deleteSandbox(t, c, name)
	if err := pvcs.Delete(ctx, pvcName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		_, statErr := os.Stat(dir)
		return apierrors.IsNotFound(err) && os.IsNotExist(statErr), nil
	})
	if err != nil {
		t.Errorf("PV %s or directory %s not removed after the claim was deleted", pv.Name, dir)
	}
}

func pvHostDir(pv *corev1.PersistentVolume) string {
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	}
	return ""
}

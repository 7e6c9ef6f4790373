package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/manager"
)

var (
	clientMu  sync.Mutex
	clientCfg *rest.Config
	k8s       client.Client
)

// ensureController returns a client with the project's types. The
// controller itself runs in the cluster (installed by TestMain).
func ensureController(t testing.TB) client.Client {
	t.Helper()
	clientMu.Lock()
	defer clientMu.Unlock()
	// Rebuilt when connect() made a new config (a test took the cluster
	// down and up), so no test depends on running before that one.
	if k8s == nil || clientCfg != restConfig {
		scheme, err := manager.NewScheme()
		if err != nil {
			t.Fatalf("creating a client: %v", err)
		}
		c, err := client.New(restConfig, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatalf("creating a client: %v", err)
		}
		k8s, clientCfg = c, restConfig
	}
	return k8s
}

// webSandbox serves the content of a file on :8080; the file is written by
// script before httpd starts.
func webSandbox(name, runtimeClass, script string) *sandboxv1beta1.Sandbox {
	pod := webPod(name, runtimeClass)
	pod.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "mkdir -p /www && " + script + " && exec httpd -f -p 8080 -h /www"}
	yes := true
	return &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			Service:     &yes,
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: pod.Spec, ObjectMeta: sandboxv1beta1.PodMetadata{Labels: pod.Labels}},
		}},
	}
}

func waitSandboxReady(t *testing.T, c client.Client, name string) *sandboxv1beta1.Sandbox {
	t.Helper()
	var sb sandboxv1beta1.Sandbox
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: name}, &sb); err == nil &&
			meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady) && len(sb.Status.PodIPs) > 0 {
			return &sb
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sandbox %s not Ready in time; conditions %+v", name, sb.Status.Conditions)
	return nil
}

func deleteSandbox(t *testing.T, c client.Client, name string) {
	t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
	if err := c.Delete(context.Background(), sb); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting sandbox %s: %v", name, err)
	}
	waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})
}

func waitGone(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%T %s still exists", obj, obj.GetName())
}

// A Sandbox gets a real Pod under the RuntimeClass its template names, and
// the kernel answering inside is gVisor's (or the host's for runc).
func TestSandboxRunsUnderRuntimeClass(t *testing.T) {
	c := ensureController(t)
	hostVersion, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range []string{"gvisor", "runc"} {
		t.Run(rc, func(t *testing.T) {
			name := "sbx-" + rc
			if err := c.Create(context.Background(), webSandbox(name, rc, "cat /proc/version > /www/index.html")); err != nil {
				t.Fatal(err)
			}
			defer deleteSandbox(t, c, name)
			sb := waitSandboxReady(t, c, name)
			pod, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != rc {
				t.Errorf("pod runtimeClassName = %v, want %s", pod.Spec.RuntimeClassName, rc)
			}
			if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != sb.UID {
				t.Errorf("pod is not controlled by the sandbox: %+v", pod.OwnerReferences)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			inside := httpGet(ctx, t, fmt.Sprintf("http://%s:8080/", sb.Status.PodIPs[0]))
			gvisor := strings.Contains(inside, "gVisor") || strings.Contains(inside, "-gvisor")
			switch {
			case rc == "gvisor" && !gvisor:
				t.Errorf("gvisor sandbox reports kernel %q", inside)
			case rc == "runc" && strings.TrimSpace(inside) != strings.TrimSpace(string(hostVersion)):
				t.Errorf("runc sandbox reports %q, host has %q", inside, hostVersion)
			}
			if sb.Status.ServiceFQDN != name+".default.svc.cluster.local" {
				t.Errorf("serviceFQDN = %q", sb.Status.ServiceFQDN)
			}
		})
	}
}

// Suspend deletes the Pod and keeps the volume; resume brings the same
// data back in a new Pod.
func TestSandboxSuspendResumeKeepsVolumeData(t *testing.T) {
	c := ensureController(t)
	const name = "sbx-persist"
	pvDir := filepath.Join("/var/lib/agent-sandbox/e2e-volumes", name)
	if err := os.MkdirAll(pvDir, 0o777); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(pvDir)
	// No dynamic provisioner runs in the local cluster: a static hostPath
	// volume pre-bound to the claim the Sandbox will create.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "e2e-manual",
			ClaimRef:                      &corev1.ObjectReference{Namespace: metav1.NamespaceDefault, Name: "data-" + name},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		},
	}
	if err := c.Create(context.Background(), pv); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), pv) }()

	sc := "e2e-manual"
	sb := webSandbox(name, "gvisor", "([ -f /data/marker ] || date +%s%N > /data/marker) && cp /data/marker /www/index.html")
	sb.Spec.PodTemplate.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	sb.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{{
		EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &sc,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
	if err := c.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	defer func() {
		deleteSandbox(t, c, name)
		waitGone(t, c, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "data-" + name}})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := waitSandboxReady(t, c, name)
	marker := httpGet(ctx, t, fmt.Sprintf("http://%s:8080/", first.Status.PodIPs[0]))
	if strings.TrimSpace(marker) == "" {
		t.Fatal("no marker written")
	}
	pod1, _ := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})

	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeSuspended)
	waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "data-" + name}, pvc); err != nil {
		t.Fatalf("PVC must survive suspension: %v", err)
	}

	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
	second := waitSandboxReady(t, c, name)
	pod2, _ := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
	if pod1 != nil && pod2 != nil && pod1.UID == pod2.UID {
		t.Errorf("resume must run a new pod")
	}
	if again := httpGet(ctx, t, fmt.Sprintf("http://%s:8080/", second.Status.PodIPs[0])); again != marker {
		t.Errorf("data lost across suspend/resume: %q then %q", marker, again)
	}
}

func setOperatingMode(t *testing.T, c client.Client, name string, mode sandboxv1beta1.OperatingMode) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"operatingMode":%q}}`, mode)
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
	if err := c.Patch(context.Background(), sb, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// Expiry with the Delete policy removes the Sandbox and, through owner
// references and the cluster's garbage collector, its Pod and Service.
func TestSandboxExpiryDeleteRemovesEverything(t *testing.T) {
	c := ensureController(t)
	const name = "sbx-expire"
	sb := webSandbox(name, "gvisor", "echo hi > /www/index.html")
	at := metav1.NewTime(time.Now().Add(8 * time.Second))
	policy := sandboxv1beta1.ShutdownPolicyDelete
	sb.Spec.ShutdownTime, sb.Spec.ShutdownPolicy = &at, &policy
	if err := c.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	waitSandboxReady(t, c, name)
	for _, o := range []client.Object{
		&sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}},
	} {
		waitGone(t, c, o)
	}
}

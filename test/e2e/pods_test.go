package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// webPod serves its own /proc/version on :8080 with busybox httpd.
func webPod(name, runtimeClass string) *corev1.Pod {
	grace := int64(1)
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "agent-sandbox-e2e"}},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &runtimeClass,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "web",
				Image:           busyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", "mkdir -p /www && cat /proc/version > /www/index.html && exec httpd -f -p 8080 -h /www"},
				Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// TestPodRuntimes runs a pod under each RuntimeClass and checks, through the
// pod's network (host -> pod IP) and through the apiserver (exec via the
// kubelet), which kernel answers: gVisor's own, or the host's.
func TestPodRuntimes(t *testing.T) {
	hostVersion, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		runtimeClass string
		check        func(t *testing.T, procVersion string)
	}{
		{"gvisor", func(t *testing.T, v string) {
			t.Helper()
			if !strings.Contains(strings.ToLower(v), "gvisor") && !strings.Contains(v, "4.4.0") {
				t.Errorf("/proc/version under gVisor = %q, want gVisor's kernel", v)
			}
			if strings.TrimSpace(v) == strings.TrimSpace(string(hostVersion)) {
				t.Errorf("/proc/version under gVisor is the host's: %q", v)
			}
		}},
		{"runc", func(t *testing.T, v string) {
			t.Helper()
			if strings.TrimSpace(v) != strings.TrimSpace(string(hostVersion)) {
				t.Errorf("/proc/version under runc = %q, want the host's %q", v, hostVersion)
			}
		}},
	} {
		t.Run(tc.runtimeClass, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			name := "e2e-web-" + tc.runtimeClass
			pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
			deletePod(t, name)
			start := time.Now()
			if _, err := pods.Create(ctx, webPod(name, tc.runtimeClass), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deletePod(t, name) })
			pod := waitPodReady(ctx, t, name)
			t.Logf("%s pod Ready in %.2fs (ip %s)", tc.runtimeClass, time.Since(start).Seconds(), pod.Status.PodIP)

			if got := *pod.Spec.RuntimeClassName; got != tc.runtimeClass {
				t.Errorf("runtimeClassName = %s", got)
			}
			body := httpGet(ctx, t, fmt.Sprintf("http://%s:8080/", pod.Status.PodIP))
			tc.check(t, body)

			out := execInPod(ctx, t, name, "cat", "/proc/version")
			tc.check(t, out)
			if strings.TrimSpace(out) != strings.TrimSpace(body) {
				t.Errorf("exec and HTTP disagree: %q vs %q", out, body)
			}

			// In-cluster clients (the controller, the router) reach the
			// apiserver through the `kubernetes` Service; there is no
			// kube-proxy, the node DNATs that one ClusterIP.
			conn := execInPod(ctx, t, name, "sh", "-c", `nc -w 3 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" </dev/null && echo connected`)
			if strings.TrimSpace(conn) != "connected" {
				t.Errorf("pod cannot reach the apiserver at the kubernetes Service: %q", conn)
			}
		})
	}
}

func waitPodReady(ctx context.Context, t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // transient: poll on until ctx ends
		}
		pod = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		evs, _ := clientset.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		var msgs []string
		for _, e := range evs.Items {
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		t.Fatalf("pod %s not Ready: %v; status %+v; events %v", name, err, pod.Status, msgs)
	}
	return pod
}

func deletePod(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("delete pod %s: %v", name, err)
		return
	}
	_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func httpGet(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

// execInPod runs a command like `kubectl exec`: apiserver -> kubelet ->
// containerd streaming, WebSocket first with SPDY as fallback.
func execInPod(ctx context.Context, t *testing.T, pod string, command ...string) string {
	t.Helper()
	req := clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(metav1.NamespaceDefault).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(restConfig, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(restConfig, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec %v in %s: %v (stderr %q)", command, pod, err, stderr.String())
	}
	return stdout.String()
}

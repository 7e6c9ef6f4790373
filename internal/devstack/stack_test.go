package devstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// The package's one test needs the whole stack: under -short the binary exits
// before it, and `make test-unit` does not build it at all.
func TestMain(m *testing.M) {
	testenv.ExitIfShort("the devstack (apiserver, controller, router, sandboxd)", testenv.IntegrationTarget)
	os.Exit(m.Run())
}

// One stack for the package: it takes seconds to start.
func TestStack(t *testing.T) {
	testenv.SkipShortNeeds(t, "the devstack (apiserver, controller, router, sandboxd)")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log io.Writer
	if os.Getenv("DEVSTACK_LOG") != "" {
		log = os.Stderr
	}
	st, err := Start(ctx, Options{WarmPoolReplicas: 1, Log: log, LateBinding: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = st.Stop()
		}
	})
	if _, err := os.Stat(st.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(st.Config)
	if err != nil {
		t.Fatal(err)
	}

	pod := poolPod(t, ctx, st)
	ip := pod.Status.PodIP
	if !strings.HasPrefix(ip, "127.") || ip == "127.0.0.1" {
		t.Fatalf("pod IP %q is not a private loopback address", ip)
	}

	t.Run("pod IP serves sandboxd", func(t *testing.T) {
		body := get(t, "http://"+net.JoinHostPort(ip, strconv.Itoa(LegacyPort))+"/")
		if !strings.Contains(body, "Sandbox Runtime is active") {
			t.Errorf("legacy root = %q", body)
		}
	})

	t.Run("router routes to the pod", func(t *testing.T) {
		// An unclaimed warm-pool sandbox is reachable through the router
		// by name plus UID (the UID acts as a capability).
		owner := metav1.GetControllerOf(&pod)
		if owner == nil || owner.Kind != "Sandbox" {
			t.Fatalf("pod has no Sandbox controller: %v", pod.OwnerReferences)
		}
		req, _ := http.NewRequest(http.MethodGet, st.RouterURL+"/", nil)
		req.Header.Set("X-Sandbox-ID", owner.Name)
		req.Header.Set("X-Sandbox-UID", string(owner.UID))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "Sandbox Runtime is active") {
			t.Errorf("router answered %d %q", resp.StatusCode, b)
		}
	})

	t.Run("port-forward through the API front", func(t *testing.T) {
		for _, ns := range []string{"default", "agent-sandbox-system"} {
			got := forwardGet(t, st, ns, RouterPodName, RouterPort, "/healthz")
			if !strings.Contains(got, `"status":"ok"`) {
				t.Errorf("router healthz via port-forward in %s = %q", ns, got)
			}
		}
		got := forwardGet(t, st, pod.Namespace, pod.Name, RESTPort, "/v1/health")
		if !strings.Contains(got, `"status":"ok"`) {
			t.Errorf("sandboxd health via port-forward = %q", got)
		}
	})

	t.Run("crashed process is restarted", func(t *testing.T) {
		pid := listenerPID(t, ip, RESTPort)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "pod reported not ready, then ready again on the same IP", func() bool {
			p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && podReady(p) && p.Status.PodIP == ip && listenerPIDOrZero(ip, RESTPort) != pid &&
				listenerPIDOrZero(ip, RESTPort) != 0
		})
	})

	t.Run("deleting the pod stops its process", func(t *testing.T) {
		if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "process gone", func() bool { return !listening(ip, LegacyPort) })
		// The pool replaces the member.
		if err := st.WaitWarmPoolReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a claim with env is served warm and sees its env", func(t *testing.T) {
		c := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: st.Namespace, Name: "env-claim"},
			Spec: extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: st.WarmPool},
				Env: []extv1beta1.EnvVar{{Name: "GREETING", Value: "late-bound"}}}}
		if err := st.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		var sbName string
		waitFor(t, "the env claim Ready", func() bool {
			var got extv1beta1.SandboxClaim
			if st.Client.Get(ctx, client.ObjectKeyFromObject(c), &got) != nil {
				return false
			}
			sbName = got.Status.SandboxStatus.Name
			return apimeta.IsStatusConditionTrue(got.Status.Conditions, "Ready")
		})
		if sbName == c.Name {
			t.Fatalf("the env claim got a cold sandbox")
		}
		p, err := cs.CoreV1().Pods(st.Namespace).Get(ctx, sbName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(LegacyPort))+"/execute", "application/json",
			strings.NewReader(`{"command":"printenv GREETING"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.Contains(string(b), `"stdout":"late-bound\n"`) {
			t.Fatalf("printenv in the warm sandbox: %s", b)
		}
		if err := st.WaitWarmPoolReady(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	})

	work := st.WorkDir
	next := poolPod(t, ctx, st)
	if err := st.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	stopped = true
	if listening(next.Status.PodIP, LegacyPort) {
		t.Error("sandboxd still listening after Stop")
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Errorf("work dir left behind: %v", err)
	}
}

func poolPod(t *testing.T, ctx context.Context, st *Stack) corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	var found corev1.Pod
	waitFor(t, "a ready pool pod", func() bool {
		if err := st.Client.List(ctx, &pods, client.InNamespace(st.Namespace), client.HasLabels{sblabels.SandboxNameHash}); err != nil {
			return false
		}
		for _, p := range pods.Items {
			if podReady(&p) && p.DeletionTimestamp == nil {
				found = p
				return true
			}
		}
		return false
	})
	return found
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// forwardGet port-forwards to pod's port through the stack's API front
// (client-go SPDY, as kubectl and the SDKs do) and GETs path.
func forwardGet(t *testing.T, st *Stack, ns, pod string, port int, path string) string {
	t.Helper()
	rt, up, err := spdy.RoundTripperFor(st.Config)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := kubernetes.NewForConfig(st.Config)
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(spdy.NewDialer(up, &http.Client{Transport: rt}, http.MethodPost, u),
		[]string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() { close(stop); <-done }() //nolint:errcheck // ForwardPorts ends when stop closes; that error says nothing
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward to %s/%s: %v", ns, pod, err)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	return get(t, fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, path))
}

func listening(ip string, port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// listenerPID finds the process listening on ip:port through /proc.
func listenerPID(t *testing.T, ip string, port int) int {
	t.Helper()
	pid := listenerPIDOrZero(ip, port)
	if pid == 0 {
		t.Fatalf("no process listens on %s:%d", ip, port)
	}
	return pid
}

func listenerPIDOrZero(ip string, port int) int {
	inode := listenInode(ip, port)
	if inode == "" {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); err == nil && l == "socket:["+inode+"]" {
				return pid
			}
		}
	}
	return 0
}

// listenInode returns the socket inode of a TCP listener on ip:port from
// /proc/net/tcp.
func listenInode(ip string, port int) string {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	a := net.ParseIP(ip).To4()
	if a == nil {
		return ""
	}
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == want && f[3] == "0A" { // 0A = LISTEN
			return f[9]
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sblabels "sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/router"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env *testenv.Env

// TestMain fails (never skips) when the apiserver binaries are missing;
// testenv's message says to run hack/kube/build.sh. Every test here needs
// the apiserver: under -short the binary exits before starting one, and
// `make test-unit` does not build it at all.
func TestMain(m *testing.M) {
	testenv.ExitIfShort("a kube-apiserver and etcd", testenv.IntegrationTarget)
	testenv.Main(m, &env)
}

// failAfter bounds waits so a broken test fails instead of hanging.
const failAfter = 30 * time.Second

func newNamespace(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "router-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if err := env.Client.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return ns.Name
}

func newSandbox(t *testing.T, ns, name string, mode sandboxv1beta1.OperatingMode, port uint16) *sandboxv1beta1.Sandbox {
	t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	sb.Spec.OperatingMode = mode
	sb.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "runtime", Image: "sandboxd:test",
		Ports: []corev1.ContainerPort{{ContainerPort: int32(port)}}}}
	if err := env.Client.Create(context.Background(), sb); err != nil {
		t.Fatalf("creating sandbox: %v", err)
	}
	return sb
}

// fakeNode plays the Sandbox controller and the kubelet for the sandboxes
// it is told about: for operatingMode Running it creates the Pod (controlled
// by the Sandbox, with the name-hash label), reports it Running/Ready at the
// sandbox's test address, and sets Sandbox status Ready=True with podIPs;
// for Suspended it deletes the Pod and reports Ready=False/SandboxSuspended.
// Everything goes through the real apiserver.
type fakeNode struct {
	t     *testing.T
	ns    string
	mu    sync.Mutex
	addrs map[string]netip.Addr // sandbox -> pod IP
	// hold lists sandboxes whose resume is never completed.
	hold map[string]bool
}

func startFakeNode(t *testing.T, ns string) *fakeNode {
	t.Helper()
	n := &fakeNode{t: t, ns: ns, addrs: map[string]netip.Addr{}, hold: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := n.reconcile(ctx); err != nil && ctx.Err() == nil {
					t.Logf("fake node: %v", err)
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

func (n *fakeNode) set(name string, ip netip.Addr, hold bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs[name] = ip
	n.hold[name] = hold
}

func (n *fakeNode) reconcile(ctx context.Context) error {
	var list sandboxv1beta1.SandboxList
	if err := env.Client.List(ctx, &list, client.InNamespace(n.ns)); err != nil {
		return fmt.Errorf("listing sandboxes: %w", err)
	}
	for i := range list.Items {
		sb := &list.Items[i]
		n.mu.Lock()
		ip, known := n.addrs[sb.Name]
		hold := n.hold[sb.Name]
		n.mu.Unlock()
		if !known || sb.DeletionTimestamp != nil {
			continue
		}
		var err error
		if sb.Spec.OperatingMode == sandboxv1beta1.OperatingModeSuspended {
			err = n.suspend(ctx, sb)
		} else if !hold {
			err = n.run(ctx, sb, ip)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (n *fakeNode) run(ctx context.Context, sb *sandboxv1beta1.Sandbox, ip netip.Addr) error {
	ready := meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if ready && len(sb.Status.PodIPs) > 0 {
		return nil
	}
	pod := &corev1.Pod{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: sb.Namespace, Name: sb.Name}, pod)
	if apierrors.IsNotFound(err) {
		pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: sb.Namespace,
			Labels: map[string]string{sblabels.SandboxNameHash: sblabels.NameHash(sb.Name)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sandboxv1beta1.GroupVersion.String(),
				Kind: "Sandbox", Name: sb.Name, UID: sb.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: *sb.Spec.PodTemplate.Spec.DeepCopy()}
		pod.Spec.AutomountServiceAccountToken = ptr.To(false)
		if err := env.Client.Create(ctx, pod); err != nil {
			return fmt.Errorf("creating pod: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("getting pod: %w", err)
	}
	if pod.Status.Phase != corev1.PodRunning {
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(),
			PodIPs:     []corev1.PodIP{{IP: ip.String()}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		if err := env.Client.Status().Update(ctx, pod); err != nil {
			return fmt.Errorf("pod status: %w", err)
		}
	}
	sb.Status.PodIPs = []string{ip.String()}
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: sandboxv1beta1.SandboxConditionReady,
		Status: metav1.ConditionTrue, Reason: sandboxv1beta1.ReasonDependenciesReady, Message: "Pod is Ready",
		ObservedGeneration: sb.Generation})
	if err := env.Client.Status().Update(ctx, sb); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("sandbox status: %w", err)
	}
	return nil
}

func (n *fakeNode) suspend(ctx context.Context, sb *sandboxv1beta1.Sandbox) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sb.Name, Namespace: sb.Namespace}}
	if err := env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pod: %w", err)
	}
	c := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionReady)
	if c != nil && c.Reason == sandboxv1beta1.ReasonSandboxSuspended && len(sb.Status.PodIPs) == 0 {
		return nil
	}
	sb.Status.PodIPs = nil
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: sandboxv1beta1.SandboxConditionReady,
		Status: metav1.ConditionFalse, Reason: sandboxv1beta1.ReasonSandboxSuspended, Message: "Sandbox is suspended",
		ObservedGeneration: sb.Generation})
	if err := env.Client.Status().Update(ctx, sb); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("sandbox status: %w", err)
	}
	return nil
}

// backend serves "<name>" on ip:0.
func backend(t *testing.T, ip, name string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, name)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// runningRouter is a router started through router.Run, the same code path
// as the binary, configured with command-line flags.
type runningRouter struct {
	proxy, metrics string
}

func startRouter(t *testing.T, ns string, extra ...string) *runningRouter {
	t.Helper()
	r := &runningRouter{proxy: freeAddr(t), metrics: freeAddr(t)}
	probes := freeAddr(t)
	args := append([]string{
		"--http-bind-address=" + r.proxy, "--metrics-bind-address=" + r.metrics,
		"--health-probe-bind-address=" + probes, "--kubeconfig=" + env.Kubeconfig,
		"--cache-namespace=" + ns, "--allow-loopback-pod-ip", "--access-log=false",
		"--shutdown-timeout=2s",
	}, extra...)
	cfg, err := router.ParseConfig(args, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx, cfg, logr.Discard(), router.BuildInfo{GitVersion: "test"}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	deadline := time.Now().Add(failAfter)
	for {
		resp, err := http.Get("http://" + probes + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return r
			}
		}
		select {
		case err := <-done:
			t.Fatalf("router exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("router never became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type result struct {
	code int
	body string
}

func (r *runningRouter) get(t *testing.T, ns, name string, port uint16, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+r.proxy+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Sandbox-ID", name)
	req.Header.Set("X-Sandbox-Namespace", ns)
	req.Header.Set("X-Sandbox-Port", fmt.Sprint(port))
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return result{resp.StatusCode, b.String()}
}

// metric returns the value of one sample line of the router's /metrics.
func (r *runningRouter) metric(t *testing.T, prefix string) string {
	t.Helper()
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	return ""
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getSandbox(t *testing.T, ns, name string) *sandboxv1beta1.Sandbox {
	t.Helper()
	sb := &sandboxv1beta1.Sandbox{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

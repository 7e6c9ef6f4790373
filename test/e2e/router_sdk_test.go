package e2e

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/bench"
)

// ttiPool makes a namespace with a copy of the platform's gVisor
// python-runtime template and a warm pool of size replicas, waits until
// the pool is Ready and returns the namespace and pool names. Everything
// goes with the namespace at the end of the test.
func ttiPool(t *testing.T, c client.Client, replicas int32) (string, string) {
	t.Helper()
	ctx := context.Background()
	tmpl := &extv1beta1.SandboxTemplate{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "python-runtime-template"}, tmpl); err != nil {
		t.Fatalf("the default template is missing: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-sdk-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	mine := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "tti-template"}, Spec: *tmpl.Spec.DeepCopy()}
	if err := c.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	pool := &extv1beta1.SandboxWarmPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "tti-pool"},
		Spec:       extv1beta1.SandboxWarmPoolSpec{Replicas: &replicas, SandboxTemplateRef: extv1beta1.SandboxTemplateRef{Name: mine.Name}},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p := &extv1beta1.SandboxWarmPool{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), p); err == nil && p.Status.ReadyReplicas == replicas {
			return ns.Name, pool.Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s/%s never filled", ns.Name, pool.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// envInt reads a positive integer from the environment, else def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// The Go SDK against real gVisor pods: the whole flow once through the
// default connection (a port-forward tunnel to the router in
// agent-sandbox-system), then time to interactive over 50 warm claims
// (AGENT_SANDBOX_E2E_TTI_CLAIMS) one after another, through the router's
// address and through the tunnel, with the milestone breakdown in the
// log. Numbers are reported, never asserted; what is asserted is that
// every claim worked and was warm. The same measurement is
// `agent-sandbox bench --scenario sdk --count 50 --pace`.
func TestGoSDKTimeToInteractiveOnGVisor(t *testing.T) {
	// The SDK and the harness build controller-runtime clients, which
	// print a stack trace when no logger was ever set.
	ctrllog.SetLogger(logr.Discard())
	c := ensureController(t)
	router := routerURL(t, c)
	ns, pool := ttiPool(t, c, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	t.Run("claim, run, files, terminate", func(t *testing.T) {
		cl, err := sandbox.NewClient(ctx, sandbox.Options{RestConfig: restConfig, Namespace: ns, Quiet: true})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := cl.CreateSandbox(ctx, pool, ns)
		if err != nil {
			t.Fatalf("CreateSandbox through the tunnel: %v", err)
		}
		defer func() { _ = cl.DeleteAll(context.Background()) }()
		if res, err := sb.Run(ctx, "uname -a"); err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "Linux") {
			t.Fatalf("Run = %+v, %v", res, err)
		}
		if err := sb.Files().Write(ctx, "hello.txt", []byte("hello gVisor\n")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if got, err := sb.Files().Read(ctx, "hello.txt"); err != nil || string(got) != "hello gVisor\n" {
			t.Fatalf("Read = %q, %v", got, err)
		}
		if res, err := sb.Run(ctx, "cat hello.txt"); err != nil || res.Stdout != "hello gVisor\n" {
			t.Fatalf("the command does not see the file: %+v, %v", res, err)
		}
		if ok, err := sb.Exists(ctx, "hello.txt"); err != nil || !ok {
			t.Errorf("Exists = %v, %v", ok, err)
		}
		claim, name := sb.ClaimName(), sb.SandboxName()
		if err := cl.DeleteSandbox(ctx, claim, ns); err != nil {
			t.Fatalf("terminate: %v", err)
		}
		waitGone(t, c, &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}})
		waitGone(t, c, &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	})

	for _, tc := range []struct {
		name   string
		claims int
		opts   sandbox.Options
	}{
		{"router address", envInt("AGENT_SANDBOX_E2E_TTI_CLAIMS", 50), sandbox.Options{APIURL: router}},
		{"port-forward tunnel", envInt("AGENT_SANDBOX_E2E_TTI_TUNNEL_CLAIMS", 10), sandbox.Options{}},
	} {
		t.Run("time to interactive through the "+tc.name, func(t *testing.T) {
			load := loadAverage()
			res, err := bench.RunSDK(ctx, bench.SDKConfig{
				RestConfig: restConfig, Namespace: ns, WarmPool: pool, Count: tc.claims, Pace: true,
				Options: tc.opts, Timeout: 3 * time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			var table bytes.Buffer
			_ = bench.WriteTable(&table, res)
			t.Logf("Go SDK time to interactive through the %s, %d claims on gVisor (load average %s before, %s after):\n%s",
				tc.name, tc.claims, load, loadAverage(), table.String())
			if res.Claims != tc.claims || res.Errors != 0 || res.Ready != tc.claims {
				for _, tr := range res.Traces {
					if tr.Err != "" {
						t.Errorf("claim %s: %s", tr.Name, tr.Err)
					}
				}
				t.Fatalf("claims %d, ready %d, errors %d", res.Claims, res.Ready, res.Errors)
			}
			if res.Warm != tc.claims {
				t.Errorf("%d of %d claims were warm: a paced, full pool must serve every claim warm", res.Warm, tc.claims)
			}
		})
	}
}

// loadAverage is the 1, 5 and 15 minute load average, for the log.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// A request for a Suspended sandbox wakes it: the router resumes it, holds
// the request until the new Pod is Ready, then forwards.
func TestRouterAutoResumesSuspendedSandbox(t *testing.T) {
	c := ensureController(t)
	router := routerURL(t, c)
	const name = "sbx-sleepy"
	sb := webSandbox(name, "gvisor", "true")
	// The python runtime image answers the legacy API on 8888.
	sb.Spec.PodTemplate.Spec.Containers[0].Image = "localhost/agent-sandbox/python-runtime:dev"
	sb.Spec.PodTemplate.Spec.Containers[0].Command = nil
	sb.Spec.PodTemplate.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8888}}
	sb.Spec.PodTemplate.Spec.Containers[0].ReadinessProbe.HTTPGet.Port.IntVal = 8888
	if err := c.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	defer deleteSandbox(t, c, name)
	waitSandboxReady(t, c, name)
	if out, code := execute(t, router, metav1.NamespaceDefault, name, "echo awake"); code != 0 || out != "awake\n" {
		t.Fatalf("before suspend: %d %q", code, out)
	}
	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeSuspended)
	waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})

	start := time.Now()
	out, code := execute(t, router, metav1.NamespaceDefault, name, "echo resumed")
	if code != 0 || out != "resumed\n" {
		t.Fatalf("after suspend: %d %q", code, out)
	}
	t.Logf("first request to a suspended gVisor sandbox answered after %s", time.Since(start).Round(time.Millisecond))
	cur := &sandboxv1beta1.Sandbox{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: name}, cur); err != nil {
		t.Fatal(err)
	}
	if cur.Spec.OperatingMode != sandboxv1beta1.OperatingModeRunning {
		t.Errorf("operatingMode after the request = %q, want Running", cur.Spec.OperatingMode)
	}
}

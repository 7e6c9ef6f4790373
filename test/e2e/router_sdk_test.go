package e2e

import (
	"context"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1beta1 "github.com/agent-sandbox/agent-sandbox/api/v1beta1"
	"github.com/agent-sandbox/agent-sandbox/clients/go/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/platform"
)

// The Go SDK claims from the warm pool, runs a command through the router
// and closes, against real gVisor pods. The time from the claim call to the
// first command output is logged per claim and summarised (numbers, not
// assertions).
func TestGoSDKTimeToInteractiveOnGVisor(t *testing.T) {
	c := ensureController(t)
	router := routerURL(t, c)
	waitPoolReady(t, c, platform.DefaultPool)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	client, err := sandbox.NewClient(ctx, sandbox.Options{RestConfig: restConfig, APIURL: router, Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var tti []time.Duration
	for i := 0; i < n; i++ {
		waitPoolReady(t, c, platform.DefaultPool) // measure warm claims, not refill
		start := time.Now()
		sb, err := client.CreateSandbox(ctx, platform.DefaultPool, metav1.NamespaceDefault)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		res, err := sb.Run(ctx, "echo ready")
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		tti = append(tti, time.Since(start))
		if res.Stdout != "ready\n" || res.ExitCode != 0 {
			t.Errorf("run %d: %+v", i, res)
		}
		if err := sb.Close(ctx); err != nil {
			t.Errorf("close %d: %v", i, err)
		}
	}
	sort.Slice(tti, func(i, j int) bool { return tti[i] < tti[j] })
	t.Logf("Go SDK time to interactive over %d warm claims on gVisor: p50 %s, p90 %s, max %s",
		n, tti[n/2-1].Round(time.Millisecond), tti[n*9/10-1].Round(time.Millisecond), tti[n-1].Round(time.Millisecond))
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

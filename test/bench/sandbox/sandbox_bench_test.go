// Package sandbox_test benchmarks the Sandbox controller on a real
// kube-apiserver: how fast a burst of Sandboxes gets Pods and becomes Ready,
// and how many apiserver writes the controller spends per Sandbox.
//
//	go test ./test/bench/sandbox -run '^$' -bench . -benchtime 1x
package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var (
	env    *testenv.Env
	writes *testenv.WriteCounter
)

func TestMain(m *testing.M) {
	testenv.ExitIfShort("a kube-apiserver, the kubelet stand-in and the controller", "make bench")
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	kubelet, err := testenv.StartKubelet(env.Config, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer kubelet.Stop()
	writes = testenv.NewWriteCounter()
	cfg := writes.Wrap(env.Config)
	cfg.QPS, cfg.Burst = -1, 10
	mgr, err := manager.New(cfg, manager.Options{MetricsBindAddress: "0", HealthProbeBindAddress: "0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := sandbox.SetupWithManager(mgr, sandbox.Options{Workers: 100, StatusCoalesceWindow: time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }() //nolint:errcheck // shutdown; its result is not under test
	return m.Run()
}

func newSandbox(ns, name string) *sandboxv1beta1.Sandbox {
	return &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			}},
		}},
	}
}

// BenchmarkSandboxBurst creates 500 Sandboxes at once and reports the time
// until all their Pods exist, until all are Ready, and the controller's
// apiserver writes per Sandbox.
func BenchmarkSandboxBurst(b *testing.B) {
	const n = 500
	c := env.Client
	for i := 0; i < b.N; i++ {
		ns := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano()%1e6, i)
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		writes.Reset()
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for j := 0; j < n; j++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(j int) {
				defer wg.Done()
				defer func() { <-sem }()
				if err := c.Create(context.Background(), newSandbox(ns, fmt.Sprintf("sb-%d", j))); err != nil {
					b.Error(err)
				}
			}(j)
		}
		wg.Wait()
		created := time.Since(start)
		podsAt := waitFor(b, func() bool {
			var pods corev1.PodList
			_ = c.List(context.Background(), &pods, client.InNamespace(ns))
			return len(pods.Items) == n
		}).Sub(start)
		readyAt := waitFor(b, func() bool {
			var list sandboxv1beta1.SandboxList
			_ = c.List(context.Background(), &list, client.InNamespace(ns))
			ready := 0
			for _, s := range list.Items {
				for _, cond := range s.Status.Conditions {
					if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue {
						ready++
					}
				}
			}
			return ready == n
		}).Sub(start)
		time.Sleep(1500 * time.Millisecond) // let deferred writes land so they are counted
		b.ReportMetric(created.Seconds(), "create_s")
		b.ReportMetric(podsAt.Seconds(), "all_pods_s")
		b.ReportMetric(readyAt.Seconds(), "all_ready_s")
		b.ReportMetric(float64(n)/readyAt.Seconds(), "sandboxes/s")
		b.ReportMetric(float64(writes.Total())/n, "writes/sandbox")
		b.Logf("writes by verb and resource: %s", writes)
	}
}

func waitFor(b *testing.B, cond func() bool) time.Time {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if cond() {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatal("timed out")
	return time.Time{}
}

package e2e

// These tests break the cluster on purpose (a killed component, a full
// down) and leave it up and connected when they end, also when they fail,
// so the other tests run before or after them in any order (-shuffle=on).

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/agent-sandbox/internal/localcluster"
)

// TestUpRestartsDeadComponent: a component that dies is reported dead by
// Status and restarted by the next Up.
func TestUpRestartsDeadComponent(t *testing.T) {
	victim := runningComponent(t, "kube-scheduler")
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restoreCluster(t) })
	deadline := time.Now().Add(10 * time.Second)
	var st localcluster.Status
	for {
		st, _ = cluster.Status()
		if stateOf(st, "kube-scheduler") == localcluster.StateDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not report the killed scheduler as dead: %+v", st.Components)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.Up(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ = cluster.Status()
	if !st.Running() {
		t.Fatalf("after up: %+v", st.Components)
	}
}

// TestUpRestartsAComponentThatWasStopping: a component still alive when Up
// plans (here frozen with SIGSTOP, as an apiserver draining after a SIGTERM
// is for seconds) but gone before it answers is started again, instead of
// being waited on until the health timeout.
func TestUpRestartsAComponentThatWasStopping(t *testing.T) {
	victim := runningComponent(t, "kube-scheduler")
	if err := syscall.Kill(victim.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(victim.PID, syscall.SIGKILL)
		restoreCluster(t)
	})
	// The plan is made before etcd is ensured, so once etcd's step is out,
	// Up has seen the scheduler alive and will wait for it to answer.
	planned := make(chan struct{})
	var once sync.Once
	var steps []string
	var mu sync.Mutex
	c := localcluster.New(clusterConfig, func(s string) {
		mu.Lock()
		steps = append(steps, s)
		mu.Unlock()
		if strings.HasPrefix(s, "etcd: ") {
			once.Do(func() { close(planned) })
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	upErr := make(chan error, 1)
	go func() { upErr <- c.Up(ctx) }()
	select {
	case <-planned:
	case err := <-upErr:
		t.Fatalf("up ended before it reached etcd: %v", err)
	}
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := <-upErr; err != nil {
		t.Fatalf("up after the scheduler ended (%.0fs): %v", time.Since(start).Seconds(), err)
	}
	st, _ := cluster.Status()
	if !st.Running() {
		t.Fatalf("after up: %+v", st.Components)
	}
	if pid := componentOf(st, "kube-scheduler").PID; pid == victim.PID {
		t.Fatalf("scheduler still reported as pid %d", pid)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(steps, func(s string) bool {
		return strings.HasPrefix(s, "kube-scheduler: pid ") && strings.Contains(s, "starting it again")
	}) {
		t.Fatalf("up did not say it restarted the scheduler; steps: %q", steps)
	}
}

// runningComponent returns the named component's status, failing the test
// unless it runs.
func runningComponent(t *testing.T, name string) localcluster.ComponentStatus {
	t.Helper()
	st, err := cluster.Status()
	if err != nil {
		t.Fatal(err)
	}
	c := componentOf(st, name)
	if c.State != localcluster.StateRunning {
		t.Fatalf("%s not running before the test: %+v", name, st.Components)
	}
	return c
}

// restoreCluster brings every component up and reconnects the package's
// clients, for the test that runs next whatever this one did. Up is
// idempotent: on a healthy cluster it changes nothing.
func restoreCluster(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cluster.Up(ctx); err != nil {
		t.Errorf("restoring the cluster: %v", err)
		return
	}
	if err := connect(); err != nil {
		t.Errorf("reconnecting after restoring the cluster: %v", err)
	}
}

func stateOf(st localcluster.Status, name string) string {
	return componentOf(st, name).State
}

// componentOf is the named component's entry in st (zero if it has none).
func componentOf(st localcluster.Status, name string) localcluster.ComponentStatus {
	for _, c := range st.Components {
		if c.Name == name {
			return c
		}
	}
	return localcluster.ComponentStatus{}
}

// TestDownLeavesNothingBehind takes the cluster down with a gVisor and a runc
// pod running and checks that no process, mount, network namespace,
// interface, iptables rule or cgroup of ours remains and that the sysctls the
// kubelet changed are restored. It then brings the cluster back up.
func TestDownLeavesNothingBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, rc := range []string{"gvisor", "runc"} {
		name := "e2e-down-" + rc
		if _, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, webPod(name, rc), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPodReady(ctx, t, name)
	}

	cfg := cluster.Config()
	recorded := map[string]string{}
	data, err := os.ReadFile(filepath.Join(cfg.RunDir, "sysctl-restore.json"))
	if err != nil {
		t.Fatalf("sysctl record: %v", err)
	}
	if err := json.Unmarshal(data, &recorded); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		restoreCluster(t)
		for _, rc := range []string{"gvisor", "runc"} {
			_ = clientset.CoreV1().Pods(metav1.NamespaceDefault).Delete(context.Background(), "e2e-down-"+rc, metav1.DeleteOptions{})
		}
	})
	start := time.Now()
	if err := cluster.Down(ctx, false); err != nil {
		t.Fatalf("down: %v", err)
	}
	t.Logf("down took %.1fs", time.Since(start).Seconds())

	left, err := cluster.FindLeftovers()
	if err != nil {
		t.Errorf("inspecting leftovers: %v", err)
	}
	if !left.Empty() {
		t.Errorf("down left things behind: %+v", left)
	}
	if _, err := os.Stat(cfg.RunDir); !os.IsNotExist(err) {
		t.Errorf("%s still exists", cfg.RunDir)
	}
	for k, want := range recorded {
		got, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		if strings.TrimSpace(string(got)) != want {
			t.Errorf("sysctl %s = %s after down, was %s before up", k, strings.TrimSpace(string(got)), want)
		}
	}
	if st, _ := cluster.Status(); stateOf(st, "kubelet") != localcluster.StateStopped {
		t.Errorf("status after down: %+v", st.Components)
	}

	// Bring it back (restoreCluster would too, but this is what is measured
	// and checked: the pods come back from etcd).
	start = time.Now()
	if err := cluster.Up(ctx); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	t.Logf("up from stopped (state kept) took %.1fs", time.Since(start).Seconds())
	if err := connect(); err != nil {
		t.Fatal(err)
	}
	for _, rc := range []string{"gvisor", "runc"} {
		name := "e2e-down-" + rc
		waitPodReady(ctx, t, name)
		deletePod(t, name)
	}
}

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"sigs.k8s.io/agent-sandbox/internal/cpuclass"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
	"sigs.k8s.io/agent-sandbox/internal/platform"
)

const (
	cpuMount          = "/sys/fs/cgroup/cpu"
	controllerAccount = "agent-sandbox-controller"
)

// TestRealtimeClassByIdentity: on a kernel with real-time group budgets,
// etcd, the apiserver and the controller run in the real-time class, the
// controller again after its Pod is replaced; a tenant Pod that copies the
// controller Pod's name, labels, resources and service account name (in its
// own namespace), and the router next to the controller (another account),
// stay in the normal class. Without budgets nothing is real-time.
func TestRealtimeClassByIdentity(t *testing.T) {
	ctx := context.Background()
	st, err := cluster.Status()
	if err != nil {
		t.Fatal(err)
	}
	budgets := cpuclass.Supported(cpuMount) == nil
	for _, name := range []string{"etcd", "kube-apiserver"} {
		rt, all := processThreadsRealtime(t, componentOf(st, name).PID)
		if budgets && rt != all || !budgets && rt != 0 {
			t.Errorf("%s: %d of %d threads real-time (host has budgets: %v)", name, rt, all, budgets)
		}
	}
	ctrl := controllerPod(ctx, t, "")
	if !budgets {
		if rt, all := podThreadsRealtime(t, ctrl); rt != 0 {
			t.Errorf("controller: %d of %d threads real-time on a host without budgets", rt, all)
		}
		return
	}
	if err := waitPodRealtime(ctx, t, ctrl); err != nil {
		t.Fatal(err)
	}
	checkOnePeriod(t, ctrl)

	// The controller goes away first, so its real-time budget is free
	// while the tenant's copy starts: an agent that chose by anything a
	// tenant can copy would grant the copy, and then have no budget left
	// for the controller when it comes back.
	deploy := controllerDeployment(ctx, t)
	orig, err := clientset.AppsV1().Deployments(platform.Namespace).GetScale(ctx, deploy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale := func(n int32) {
		t.Helper()
		s, err := clientset.AppsV1().Deployments(platform.Namespace).GetScale(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Replicas = n
		if _, err := clientset.AppsV1().Deployments(platform.Namespace).UpdateScale(ctx, deploy, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	t.Cleanup(func() { scale(orig.Spec.Replicas) })
	waitPodGone(ctx, t, platform.Namespace, ctrl.Name)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-rt-tenant-"}}
	ns, err = clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = clientset.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: controllerAccount}}
	if _, err := clientset.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	copycat := webPod(ctrl.Name, "runc")
	copycat.Labels = ctrl.Labels
	copycat.Spec.RuntimeClassName = nil
	copycat.Spec.ServiceAccountName = controllerAccount
	copycat.Spec.Containers[0].Resources = ctrl.Spec.Containers[0].Resources // same QoS class, same cgroup parents
	copycat, err = clientset.CoreV1().Pods(ns.Name).Create(ctx, copycat, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	copycat = waitPodRunning(ctx, t, ns.Name, copycat.Name)

	// The controller comes back as a new Pod: the agent grants it too.
	scale(orig.Spec.Replicas)
	next := controllerPod(ctx, t, ctrl.UID)
	granted := waitPodRealtime(ctx, t, next)
	if rt, all := podThreadsRealtime(t, copycat); rt != 0 {
		t.Errorf("the tenant's copy of the controller Pod: %d of %d threads real-time", rt, all)
	}
	if granted != nil {
		t.Fatal(granted)
	}
	routers, err := clientset.CoreV1().Pods(platform.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=sandbox-router"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range routers.Items {
		if rt, all := podThreadsRealtime(t, &routers.Items[i]); rt != 0 {
			t.Errorf("router %s: %d of %d threads real-time", routers.Items[i].Name, rt, all)
		}
	}
}

// controllerDeployment is the Deployment whose Pods run as the controller's
// service account.
func controllerDeployment(ctx context.Context, t *testing.T) string {
	t.Helper()
	ds, err := clientset.AppsV1().Deployments(platform.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds.Items {
		if d.Spec.Template.Spec.ServiceAccountName == controllerAccount {
			return d.Name
		}
	}
	t.Fatalf("no Deployment in %s runs as %s", platform.Namespace, controllerAccount)
	return ""
}

func waitPodGone(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s still there: %v", ns, name, err)
	}
}

// controllerPod returns the running controller Pod (not the one with UID
// old), waiting for it.
func controllerPod(ctx context.Context, t *testing.T, old types.UID) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := clientset.CoreV1().Pods(platform.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // the apiserver may be busy; poll again
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.ServiceAccountName == controllerAccount && p.UID != old && p.DeletionTimestamp == nil &&
				len(cpuclass.RunningContainers(p)) > 0 {
				found = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no running controller Pod (other than %q): %v", old, err)
	}
	return found
}

func waitPodRunning(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		p, err = clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(cpuclass.RunningContainers(p)) > 0, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not running: %v", ns, name, err)
	}
	return p
}

// waitPodRealtime waits until every thread of the Pod's containers is
// real-time (the agent grants after the kubelet reports the container).
func waitPodRealtime(ctx context.Context, t *testing.T, p *corev1.Pod) error {
	t.Helper()
	var rt, all int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		rt, all = podThreadsRealtime(t, p)
		return all > 0 && rt == all, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %d of %d threads real-time: %w", p.Namespace, p.Name, rt, all, err)
	}
	return nil
}

// podThreadsRealtime counts the real-time threads of a Pod's running
// containers, found through its cgroups by UID.
func podThreadsRealtime(t *testing.T, p *corev1.Pod) (rt, all int) {
	t.Helper()
	for _, chain := range podChains(t, p) {
		tids, err := cpuclass.CgroupThreads(chain[len(chain)-1])()
		if err != nil {
			t.Fatal(err)
		}
		r, a := countRealtime(t, tids)
		rt, all = rt+r, all+a
	}
	return rt, all
}

func processThreadsRealtime(t *testing.T, pid int) (rt, all int) {
	t.Helper()
	tids, err := cpuclass.ProcessThreads(pid)()
	if err != nil {
		t.Fatal(err)
	}
	return countRealtime(t, tids)
}

func countRealtime(t *testing.T, tids []int) (rt, all int) {
	t.Helper()
	for _, tid := range tids {
		yes, err := cpuclass.IsRealtime(tid)
		if err != nil {
			continue // exited meanwhile
		}
		all++
		if yes {
			rt++
		}
	}
	if all == 0 {
		t.Fatalf("no live threads among %v", tids)
	}
	return rt, all
}

// checkOnePeriod: the kernel charges a real-time thread's time to its own
// group and every parent, each against its own period, so every budget on
// the controller's chain runs over the control plane's period (a parent
// left at another period throttles the controller's bursts on its own).
func checkOnePeriod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	cp, err := cpuclass.ReadBudget(cpuMount + localcluster.ControlPlaneCPUGroup)
	if err != nil {
		t.Fatal(err)
	}
	for _, chain := range podChains(t, p) {
		for _, dir := range chain {
			b, err := cpuclass.ReadBudget(dir)
			if err != nil {
				t.Fatal(err)
			}
			if b.Runtime <= 0 || b.Period != cp.Period {
				t.Errorf("%s: real-time budget %v per %v, want a share over the control plane's period %v", dir, b.Runtime, b.Period, cp.Period)
			}
		}
	}
}

// podChains returns the cgroup chain (the kubelet's root down to the
// container) of each running container of a Pod, found by its UID.
func podChains(t *testing.T, p *corev1.Pod) [][]string {
	t.Helper()
	cg := cpuclass.PodCgroups{Mount: cpuMount, Root: localcluster.KubeletCgroupRoot}
	var chains [][]string
	for _, id := range cpuclass.RunningContainers(p) {
		chain, err := cg.Chain(p.UID, id)
		if err != nil {
			t.Fatalf("pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		chains = append(chains, chain)
	}
	return chains
}

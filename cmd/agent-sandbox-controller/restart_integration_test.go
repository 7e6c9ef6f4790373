package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/manager"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
)

// TestLostLeaseRestartsInPlace runs the controller binary as a process
// against a real API server behind a TCP front, and takes the front away
// for longer than the lease's renew deadline, three times. The process must
// lose its lease each time (controller-runtime stops leading), start again
// in place, with the same PID, without exiting into a kubelet's backoff,
// lead again under its identity and reconcile a Sandbox created after the
// outages; a SIGTERM still ends it, with no restart. With
// --leader-election-restart-in-place=false the same outage ends the
// process, as controller-runtime does: that is the behaviour this replaces,
// and the check that the outage here really costs the lease.
func TestLostLeaseRestartsInPlace(t *testing.T) {
	testenv.SkipShort(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	bin, err := testenv.RepoBinary(ctx, "", "AGENT_SANDBOX_CONTROLLER_BIN", "agent-sandbox-controller", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("restarts in place", func(t *testing.T) {
		c := startBehindFront(ctx, t, env, bin, "restart-pod_6a1f0c7e-2b1d-4c5e-8f00-000000000001")
		c.waitLeading(ctx, t)
		pid := c.cmd.Process.Pid
		for i := 1; i <= 3; i++ {
			c.outage(ctx, t, func() bool {
				return strings.Count(c.log.String(), "started in place after losing the leader lease") >= i
			})
			if c.exited() {
				t.Fatalf("outage %d: the controller exited instead of starting again in place:\n%s", i, c.log.String())
			}
			c.waitLeading(ctx, t)
		}
		if got := c.cmd.Process.Pid; got != pid {
			t.Fatalf("pid %d, want %d", got, pid)
		}
		if !strings.Contains(c.log.String(), `"restartsInPlace":3`) {
			t.Errorf("the third start in place does not count 3 restarts:\n%s", c.log.String())
		}
		// The kubelet's restartCount cannot see these restarts; the metric must.
		if m := c.scrape(t); !strings.Contains(m, "\nagent_sandbox_controller_restarts_in_place 3\n") {
			t.Errorf("metrics after three restarts in place lack agent_sandbox_controller_restarts_in_place 3:\n%s", m)
		}

		// It works again: a Sandbox created now gets its Pod.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restart-"}}
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		sb := &sandboxv1beta1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "after-outages"},
			Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
				PodTemplate: sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}},
			}},
		}
		if err := env.Client.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return env.Client.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: sb.Name}, &corev1.Pod{}) == nil, nil
		}); err != nil {
			t.Fatalf("no Pod for a Sandbox created after the outages: %v\n%s", err, c.log.String())
		}

		// Asked to stop, it stops: SIGTERM is never turned into a restart.
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			t.Fatalf("still running a minute after SIGTERM:\n%s", c.log.String())
		}
		if code := c.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0:\n%s", code, c.log.String())
		}
	})

	t.Run("exits when turned off", func(t *testing.T) {
		c := startBehindFront(ctx, t, env, bin, "exit-pod_6a1f0c7e-2b1d-4c5e-8f00-000000000002", "--leader-election-restart-in-place=false")
		c.waitLeading(ctx, t)
		c.outage(ctx, t, c.exited)
		if code := c.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(c.log.String(), "leader election lost") {
			t.Errorf("exit code %d, want an exit with \"leader election lost\":\n%s", code, c.log.String())
		}
		if strings.Contains(c.log.String(), "started in place") {
			t.Errorf("restarted in place although turned off:\n%s", c.log.String())
		}
	})
}

// frontedController is the controller process and the TCP front its
// kubeconfig points at.
type frontedController struct {
	env       *testenv.Env
	identity  string
	namespace string
	front     string // host:port the kubeconfig names
	target    string // the API server's host:port
	stopFront func()
	metrics   string // the metrics endpoint's host:port
	cmd       *exec.Cmd
	done      chan struct{}
	log       *testenv.SyncBuffer
}

func startBehindFront(ctx context.Context, t *testing.T, env *testenv.Env, bin, identity string, extra ...string) *frontedController {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &frontedController{env: env, identity: identity, front: l.Addr().String(), done: make(chan struct{}), log: &testenv.SyncBuffer{}}
	for _, cl := range kc.Clusters {
		u, err := url.Parse(cl.Server)
		if err != nil {
			t.Fatal(err)
		}
		c.target = u.Host
		cl.Server = u.Scheme + "://" + c.front
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		t.Fatal(err)
	}
	c.stopFront = testenv.StartTCPForwarder(l, c.target)
	t.Cleanup(func() { c.stopFront() })

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	c.namespace = ns.Name
	c.metrics = fmt.Sprintf("127.0.0.1:%d", freeport.T(t))
	args := append([]string{"--leader-elect=true", "--leader-election-namespace=" + ns.Name, "--leader-election-identity=" + identity,
		"--metrics-bind-address=" + c.metrics, fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", freeport.T(t)), "--enable-webhook=false"}, extra...)
	c.cmd = exec.Command(bin, args...)
	c.cmd.Env = append(os.Environ(), "KUBECONFIG="+kcPath)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		if !c.exited() {
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// scrape returns the controller's metrics page.
func (c *frontedController) scrape(t *testing.T) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + c.metrics + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func (c *frontedController) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// waitLeading waits until the Lease is held under the process's identity
// and renewed after this call.
func (c *frontedController) waitLeading(ctx context.Context, t *testing.T) {
	t.Helper()
	since := time.Now().Add(-time.Second) // the API server's clock is this machine's; allow for rounding
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if c.exited() {
			return false, fmt.Errorf("controller exited")
		}
		lease := &coordinationv1.Lease{}
		if err := c.env.Client.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: manager.LeaderElectionID}, lease); err != nil {
			return false, nil //nolint:nilerr // not created yet
		}
		renewed := lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(since)
		return ptr.Deref(lease.Spec.HolderIdentity, "") == c.identity && renewed, nil
	}); err != nil {
		t.Fatalf("not leading as %s: %v\n%s", c.identity, err, c.log.String())
	}
}

// outage takes the front away until done holds (or the controller has
// exited), at most two minutes, then brings it back on the same address.
func (c *frontedController) outage(ctx context.Context, t *testing.T, done func() bool) {
	t.Helper()
	c.stopFront()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return done() || c.exited(), nil
	})
	var l net.Listener
	if lerr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var e error
		l, e = net.Listen("tcp", c.front)
		return e == nil, nil
	}); lerr != nil {
		t.Fatalf("cannot listen on %s again: %v", c.front, lerr)
	}
	c.stopFront = testenv.StartTCPForwarder(l, c.target)
	if err != nil {
		t.Fatalf("outage: the controller neither restarted nor exited in 2 minutes: %v\n%s", err, c.log.String())
	}
}

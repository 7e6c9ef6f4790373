package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
	"sigs.k8s.io/agent-sandbox/internal/manager"
)

// These tests drive deep hibernation the way a user does: operatingMode on
// a Sandbox (or a request through the router), with the controller and the
// node agent that `up` deploys (controller --deep-hibernation, agent host
// process, hibernation shim). Nothing is called directly on the node except
// to inspect the store and to inject faults.

// counterSandbox runs counterScript (hibernate_test.go) as a gVisor Sandbox.
// With a volume, the shell first writes a marker to /data once.
func counterSandbox(name string, mib int, volume bool) *sandboxv1beta1.Sandbox {
	pod := counterPod(name, mib, nil)
	if volume {
		c := &pod.Spec.Containers[0]
		c.Command = []string{"/bin/sh", "-c", `[ -f /data/marker ] || date +%s%N > /data/marker; exec python3 -c "$0" "$1"`, counterScript, strconv.Itoa(mib)}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	}
	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec: sandboxv1beta1.SandboxSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{Spec: pod.Spec, ObjectMeta: sandboxv1beta1.PodMetadata{Labels: pod.Labels}},
		}},
	}
	if volume {
		sb.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{{
			EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}}
	}
	return sb
}

func getSandbox(t *testing.T, c client.Client, name string) *sandboxv1beta1.Sandbox {
	t.Helper()
	sb := &sandboxv1beta1.Sandbox{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: name}, sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// waitMemoryCondition waits for the MemorySnapshot condition to have reason.
func waitMemoryCondition(t *testing.T, c client.Client, name, reason string, timeout time.Duration) *sandboxv1beta1.Sandbox {
	t.Helper()
	var sb *sandboxv1beta1.Sandbox
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		sb = getSandbox(t, c, name)
		cond := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionMemorySnapshot)
		return cond != nil && cond.Reason == reason, nil
	})
	if err != nil {
		t.Fatalf("sandbox %s: MemorySnapshot condition never %s: conditions %+v, memorySnapshot %+v", name, reason, sb.Status.Conditions, sb.Status.MemorySnapshot)
	}
	return sb
}

// suspendDeep suspends and waits for the Pod to be gone; it returns the
// Sandbox as the controller left it.
func suspendDeep(t *testing.T, c client.Client, name string) (*sandboxv1beta1.Sandbox, time.Duration) {
	t.Helper()
	start := time.Now()
	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeSuspended)
	waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})
	took := time.Since(start)
	return getSandbox(t, c, name), took
}

func memoryReason(sb *sandboxv1beta1.Sandbox) string {
	if cond := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionMemorySnapshot); cond != nil {
		return cond.Reason + ": " + cond.Message
	}
	return "(no MemorySnapshot condition)"
}

// TestDeepHibernationThroughController: a gVisor Sandbox whose Python
// process holds a counter, touched memory, an open file and a listening
// socket is suspended through operatingMode: the controller asks the node
// agent for a checkpoint, records status.memorySnapshot, deletes the Pod;
// resume creates a new Pod that the shim restores: the same process (same
// PID, same random token) goes on counting. The snapshot is then consumed.
func TestDeepHibernationThroughController(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "hib-ctl"
	if err := c.Create(ctx, counterSandbox(name, 64, false)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSandbox(t, c, name) })
	sb := waitSandboxReady(t, c, name)
	before := readCounter(ctx, t, sb.Status.PodIPs[0])
	pod1, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	sb, took := suspendDeep(t, c, name)
	if sb.Status.MemorySnapshot == nil || sb.Status.MemorySnapshot.ID != string(sb.UID) {
		t.Fatalf("after suspend: memorySnapshot %+v, condition %s", sb.Status.MemorySnapshot, memoryReason(sb))
	}
	t.Logf("suspend (checkpoint + pod deletion) took %s: %s", took.Round(time.Millisecond), memoryReason(sb))
	st := hibernateCheckpointer().Store
	if m, err := st.ReadMeta(metav1.NamespaceDefault, string(sb.UID)); err != nil || m.SandboxUID != string(sb.UID) {
		t.Fatalf("snapshot in the node store: %+v, %v", m, err)
	}

	start := time.Now()
	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
	sb = waitSandboxReady(t, c, name)
	after := readCounter(ctx, t, sb.Status.PodIPs[0])
	t.Logf("resume to first answer: %s; before %+v, after %+v", time.Since(start).Round(time.Millisecond), before, after)
	pod2, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod2.UID == pod1.UID {
		t.Fatal("resume must run a new Pod")
	}
	if after.token != before.token || after.pid != before.pid || after.n < before.n || after.file != before.file || after.mem != before.mem {
		t.Fatalf("not the same process after resume: before %+v, after %+v (%s)", before, after, memoryReason(getSandbox(t, c, name)))
	}
	sb = waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonRestoredFromSnapshot, time.Minute)
	if sb.Status.MemorySnapshot != nil {
		t.Errorf("memorySnapshot still set after the restore: %+v", sb.Status.MemorySnapshot)
	}
	if _, err := st.ReadMeta(metav1.NamespaceDefault, string(sb.UID)); !hibernate.IsNotExist(err) {
		t.Errorf("the consumed snapshot is still in the store: %v", err)
	}
}

// TestDeepHibernationRouterAutoResume: one SDK call (the legacy /execute
// the SDKs speak) to a deep-suspended sandbox resumes it through the
// router, and the answer comes from the process that was running before
// the suspend: same PID, same in-memory token, a counter that went on.
func TestDeepHibernationRouterAutoResume(t *testing.T) {
	c := ensureController(t)
	router := routerURL(t, c)
	const name = "hib-router"
	sb := webSandbox(name, "gvisor", "true")
	// The python runtime image answers the legacy API on 8888.
	ctr := &sb.Spec.PodTemplate.Spec.Containers[0]
	ctr.Image = pythonRuntimeImage
	ctr.Command = nil
	ctr.Ports = []corev1.ContainerPort{{ContainerPort: 8888}}
	ctr.ReadinessProbe.HTTPGet.Port.IntVal = 8888
	if err := c.Create(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSandbox(t, c, name) })
	waitSandboxReady(t, c, name)
	// A background Python process keeps a counter and a random token in
	// memory and tells them on 127.0.0.1:9000.
	const daemon = `import os, socket, threading, time
tok = os.urandom(6).hex(); n = 0
def count():
    global n
    while True:
        n += 1; time.sleep(0.05)
threading.Thread(target=count, daemon=True).start()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 9000)); s.listen(4)
while True:
    c, _ = s.accept(); c.sendall(("%d %d %s" % (os.getpid(), n, tok)).encode()); c.close()
`
	const ask = `python3 -c 'import socket,time
for i in range(50):
    try:
        s = socket.create_connection(("127.0.0.1", 9000)); print(s.recv(100).decode()); break
    except OSError: time.sleep(0.1)'`
	if _, code := execute(t, router, metav1.NamespaceDefault, name,
		// base64 keeps the script's newlines and quotes out of the shell.
		fmt.Sprintf("setsid nohup python3 -c \"import base64; exec(base64.b64decode('%s'))\" </dev/null >/dev/null 2>&1 &",
			base64.StdEncoding.EncodeToString([]byte(daemon)))); code != 0 {
		t.Fatalf("starting the stateful process: exit %d", code)
	}
	parse := func(out string) (pid, n int, tok string) {
		f := strings.Fields(out)
		if len(f) != 3 {
			t.Fatalf("the stateful process answered %q", out)
		}
		pid, _ = strconv.Atoi(f[0])
		n, _ = strconv.Atoi(f[1])
		return pid, n, f[2]
	}
	out, _ := execute(t, router, metav1.NamespaceDefault, name, ask)
	pid0, n0, tok0 := parse(out)

	sb2, _ := suspendDeep(t, c, name)
	if sb2.Status.MemorySnapshot == nil {
		t.Fatalf("no memory snapshot after suspend: %s", memoryReason(sb2))
	}
	start := time.Now()
	out, code := execute(t, router, metav1.NamespaceDefault, name, ask)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("after auto-resume: exit %d, %q", code, out)
	}
	pid1, n1, tok1 := parse(out)
	t.Logf("one SDK call on a deep-suspended sandbox answered after %s: before pid %d n %d %s, after pid %d n %d %s",
		took.Round(time.Millisecond), pid0, n0, tok0, pid1, n1, tok1)
	if pid1 != pid0 || tok1 != tok0 || n1 < n0 {
		t.Fatalf("the router's resume did not restore the process: before %d/%d/%s, after %d/%d/%s (%s)",
			pid0, n0, tok0, pid1, n1, tok1, memoryReason(getSandbox(t, c, name)))
	}
	waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonRestoredFromSnapshot, time.Minute)
}

// TestDeepHibernationWithVolume: a Sandbox with a PersistentVolumeClaim
// keeps both its files and its memory (the snapshot, which then lives on
// that volume) across a deep suspend.
func TestDeepHibernationWithVolume(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "hib-vol"
	_, before, marker := createVolumeSandbox(t, c, name)
	sb, _ := suspendDeep(t, c, name)
	if sb.Status.MemorySnapshot == nil {
		t.Fatalf("no memory snapshot for the volume Sandbox: %s", memoryReason(sb))
	}
	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
	sb = waitSandboxReady(t, c, name)
	after := readCounter(ctx, t, sb.Status.PodIPs[0])
	if again := execInPod(ctx, t, name, "cat", "/data/marker"); again != marker {
		t.Errorf("volume data lost: %q then %q", marker, again)
	}
	if after.token != before.token || after.pid != before.pid || after.n < before.n {
		t.Fatalf("memory lost: before %+v, after %+v (%s)", before, after, memoryReason(getSandbox(t, c, name)))
	}
	waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonRestoredFromSnapshot, time.Minute)
}

// TestDeepHibernationFaults: a snapshot deleted or truncated while the
// Sandbox is suspended, and a node agent killed in the middle of a
// checkpoint, each end in a clear MemorySnapshot condition and a Sandbox
// that runs again (a clean start), never a stuck one.
func TestDeepHibernationFaults(t *testing.T) {
	c := ensureController(t)
	st := hibernateCheckpointer().Store
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, dir string)
		want    string
	}{
		{"deleted", func(t *testing.T, dir string) {
			t.Helper()
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}, "missing"},
		{"truncated", func(t *testing.T, dir string) {
			t.Helper()
			if err := os.Truncate(filepath.Join(dir, "pages.img"), 4096); err != nil {
				t.Fatal(err)
			}
		}, "truncated"},
	} {
		t.Run("snapshot "+tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			name := "hib-fault-" + tc.name
			if err := c.Create(ctx, counterSandbox(name, 64, false)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteSandbox(t, c, name) })
			sb := waitSandboxReady(t, c, name)
			before := readCounter(ctx, t, sb.Status.PodIPs[0])
			sb, _ = suspendDeep(t, c, name)
			if sb.Status.MemorySnapshot == nil {
				t.Fatalf("no memory snapshot: %s", memoryReason(sb))
			}
			dir, err := st.SnapshotDir(metav1.NamespaceDefault, string(sb.UID))
			if err != nil {
				t.Fatal(err)
			}
			tc.breakIt(t, dir)
			setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
			sb = waitSandboxReady(t, c, name)
			fresh := readCounter(ctx, t, sb.Status.PodIPs[0])
			if fresh.token == before.token {
				t.Fatalf("a %s snapshot was restored?! before %+v, after %+v", tc.name, before, fresh)
			}
			sb = waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonSnapshotRestoreFailed, time.Minute)
			cond := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionMemorySnapshot)
			if !strings.Contains(cond.Message, tc.want) || sb.Status.MemorySnapshot != nil {
				t.Errorf("condition %q (want it to say %q), memorySnapshot %+v", cond.Message, tc.want, sb.Status.MemorySnapshot)
			}
			t.Logf("%s snapshot: %s", tc.name, cond.Message)
		})
	}

	t.Run("agent killed mid-checkpoint", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		const name = "hib-fault-agent"
		if err := c.Create(ctx, counterSandbox(name, 256, false)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteSandbox(t, c, name) })
		sb := waitSandboxReady(t, c, name)
		before := readCounter(ctx, t, sb.Status.PodIPs[0])
		dir, err := st.SnapshotDir(metav1.NamespaceDefault, string(sb.UID))
		if err != nil {
			t.Fatal(err)
		}
		// The agent is the local cluster's host process; kill it once its
		// runsc checkpoint has started writing the partial snapshot, and
		// bring it back (up restarts dead components) at the end.
		pid := agentPID(t)
		t.Cleanup(func() { restartAgent(t) })
		setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeSuspended)
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, err := os.Stat(dir + ".partial")
			return err == nil, nil
		}); err != nil {
			t.Fatalf("the agent never started a checkpoint: %v", err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing the agent (pid %d): %v", pid, err)
		}
		t.Logf("killed the node agent (pid %d) mid-checkpoint", pid)
		waitGone(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}})
		sb = waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonCheckpointFailed, time.Minute)
		if sb.Status.MemorySnapshot != nil {
			t.Fatalf("memorySnapshot %+v recorded for a checkpoint that never finished", sb.Status.MemorySnapshot)
		}
		if _, err := st.ReadMeta(metav1.NamespaceDefault, string(sb.UID)); !hibernate.IsNotExist(err) {
			t.Fatalf("an unfinished checkpoint was published: %v", err)
		}
		t.Logf("condition: %s", memoryReason(sb))
		restartAgent(t)
		setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
		sb = waitSandboxReady(t, c, name)
		if fresh := readCounter(ctx, t, sb.Status.PodIPs[0]); fresh.token == before.token {
			t.Fatalf("not a clean start: %+v", fresh)
		}
	})
}

func agentPID(t *testing.T) int {
	t.Helper()
	st, err := cluster.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range st.Components {
		if cs.Name == "sandbox-hibernate-agent" && cs.State == localcluster.StateRunning {
			return cs.PID
		}
	}
	t.Fatalf("the node agent is not running: %+v", st.Components)
	return 0
}

// restartAgent brings the killed agent back: Up restarts dead components
// and leaves the healthy ones alone.
func restartAgent(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cluster.Up(ctx); err != nil {
		t.Fatalf("restarting the node agent with up: %v", err)
	}
}

// BenchmarkDeepHibernationController measures deep hibernation the way a
// user sees it, through the controller and the node agent, per memory
// touched: suspend (operatingMode Suspended until the Pod is gone; the
// agent's checkpoint is part of it), resume to the restored process's first
// answer, snapshot size; and beside it today's filesystem-only
// suspend/resume of the same Sandbox spec, run under a RuntimeClass with the
// same gVisor handler that deep hibernation does not cover (a new process,
// memory re-touched); and the same Sandbox with a PVC, whose snapshot goes
// onto the volume and is checked by SHA-256 before the restore. Run under
// the e2e lock:
//
//	flock /tmp/agent-sandbox-e2e.lock go test -count=1 -p 1 -run '^$' -bench BenchmarkDeepHibernationController -benchtime 1x ./test/e2e/
func BenchmarkDeepHibernationController(b *testing.B) {
	ctx := context.Background()
	c, err := client.New(restConfig, client.Options{Scheme: benchScheme(b)})
	if err != nil {
		b.Fatal(err)
	}
	// Same handler (runsc), another name: the controller checkpoints only
	// the gvisor class, so this is today's suspend on the same runtime.
	plain := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-gvisor-no-hibernation"}, Handler: "runsc"}
	if err := c.Create(ctx, plain); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	for _, mib := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				deep := benchSuspendResume(b, c, fmt.Sprintf("hib-bench-deep-%d", mib), mib, "", false)
				pvc := benchSuspendResume(b, c, fmt.Sprintf("hib-bench-pvc-%d", mib), mib, "", true)
				fs := benchSuspendResume(b, c, fmt.Sprintf("hib-bench-fs-%d", mib), mib, plain.Name, false)
				b.ReportMetric(deep.suspend.Seconds(), "suspend-s")
				b.ReportMetric(deep.resume.Seconds(), "resume-to-answer-s")
				b.ReportMetric(float64(deep.size)/(1<<20), "snapshot-MiB")
				b.ReportMetric(pvc.suspend.Seconds(), "pvc-suspend-s")
				b.ReportMetric(pvc.resume.Seconds(), "pvc-resume-to-answer-s")
				b.ReportMetric(fs.suspend.Seconds(), "fs-only-suspend-s")
				b.ReportMetric(fs.resume.Seconds(), "fs-only-resume-to-answer-s")
				fmt.Printf("through the controller, %5d MiB touched: deep suspend %6.2fs (checkpoint %s), snapshot %5d MiB, resume to first answer %5.2fs (same process); snapshot on the PVC: suspend %6.2fs (checkpoint %s), resume to first answer %5.2fs; filesystem-only suspend %5.2fs, resume to first answer %5.2fs (new process)\n",
					mib, deep.suspend.Seconds(), deep.checkpoint, deep.size>>20, deep.resume.Seconds(),
					pvc.suspend.Seconds(), pvc.checkpoint, pvc.resume.Seconds(), fs.suspend.Seconds(), fs.resume.Seconds())
			}
		})
	}
}

type suspendResume struct {
	suspend, resume time.Duration
	checkpoint      string
	size            int64
}

// benchSuspendResume creates a counter Sandbox (runtimeClass "" = gvisor;
// volume: with a PVC, which then holds the snapshot), suspends and resumes
// it once and deletes it.
func benchSuspendResume(b *testing.B, c client.Client, name string, mib int, runtimeClass string, volume bool) suspendResume {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb := counterSandbox(name, mib, volume)
	if runtimeClass != "" {
		sb.Spec.PodTemplate.Spec.RuntimeClassName = &runtimeClass
	}
	if err := c.Create(ctx, sb); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = c.Delete(context.Background(), sb)
		_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(sb), &sandboxv1beta1.Sandbox{})) &&
				apierrors.IsNotFound(c.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: "data-" + name}, &corev1.PersistentVolumeClaim{})), nil
		})
	}()
	before := waitFirstAnswer(ctx, b, name)
	mode := func(m sandboxv1beta1.OperatingMode) {
		patch := fmt.Sprintf(`{"spec":{"operatingMode":%q}}`, m)
		if err := c.Patch(ctx, sb, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			b.Fatal(err)
		}
	}
	var res suspendResume
	start := time.Now()
	mode(sandboxv1beta1.OperatingModeSuspended)
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		b.Fatalf("%s: pod not gone: %v", name, err)
	}
	res.suspend = time.Since(start)
	cur := &sandboxv1beta1.Sandbox{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sb), cur); err != nil {
		b.Fatal(err)
	}
	if runtimeClass == "" {
		if cur.Status.MemorySnapshot == nil || (cur.Status.MemorySnapshot.Volume != "") != volume {
			b.Fatalf("%s: memory snapshot %+v (volume %v): %s", name, cur.Status.MemorySnapshot, volume, memoryReason(cur))
		}
		res.size = cur.Status.MemorySnapshot.SizeBytes
		if _, after, ok := strings.Cut(memoryReason(cur), " in "); ok {
			res.checkpoint = after
		}
	}
	start = time.Now()
	mode(sandboxv1beta1.OperatingModeRunning)
	after := waitFirstAnswer(ctx, b, name)
	res.resume = time.Since(start)
	if restored := after.token == before.token; restored != (runtimeClass == "") {
		b.Fatalf("%s: restored=%v (tokens %s, %s): %s", name, restored, before.token, after.token, memoryReason(cur))
	}
	return res
}

func benchScheme(b *testing.B) *runtime.Scheme {
	b.Helper()
	s, err := manager.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// TestDeepHibernationPolicyOnTheCluster performs the attacks against the
// policy `up` installs: an identity that is not the controller (here even a
// cluster admin) cannot create a Pod that names another Sandbox's snapshot,
// nor ask for a checkpoint, and one that is not the node agent cannot
// forge a result.
func TestDeepHibernationPolicyOnTheCluster(t *testing.T) {
	ctx := context.Background()
	cfg := *restConfig
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "e2e-tenant", Groups: []string{"system:masters", "system:authenticated"}}
	tenant, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	pods := tenant.CoreV1().Pods(metav1.NamespaceDefault)
	for k, want := range map[string]string{
		hibernate.AnnotationRestoreSnapshot:     "only the agent-sandbox controller may set",
		hibernate.AnnotationCheckpointRequested: "only the agent-sandbox controller may set",
		hibernate.AnnotationCheckpointResult:    "only the hibernation node agent may set",
	} {
		p := counterPod("hib-attack", 1, map[string]string{k: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"})
		_, err := pods.Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a tenant Pod with %s: %v, want refused (%q)", k, err, want)
		}
	}
	// The same Pod without the annotations is admitted (the refusal is the
	// annotation's, not the identity's).
	if _, err := pods.Create(ctx, counterPod("hib-attack", 1, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("a plain Pod from the same identity: %v", err)
	}
}

// TestDeepHibernationSnapshotOfDeletedSandboxIsCollected: deleting a
// deep-suspended Sandbox does not leave its memory on the node: the node
// agent deletes snapshots whose Sandbox is gone.
func TestDeepHibernationSnapshotOfDeletedSandboxIsCollected(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "hib-gc"
	if err := c.Create(ctx, counterSandbox(name, 64, false)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSandbox(t, c, name) })
	waitSandboxReady(t, c, name)
	sb, _ := suspendDeep(t, c, name)
	if sb.Status.MemorySnapshot == nil {
		t.Fatalf("no memory snapshot: %s", memoryReason(sb))
	}
	st := hibernateCheckpointer().Store
	if _, err := st.ReadMeta(metav1.NamespaceDefault, string(sb.UID)); err != nil {
		t.Fatalf("no snapshot in the store: %v", err)
	}
	deleteSandbox(t, c, name)
	start := time.Now()
	// The agent collects every minute.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		_, err := st.ReadMeta(metav1.NamespaceDefault, string(sb.UID))
		return hibernate.IsNotExist(err), nil
	}); err != nil {
		t.Fatalf("the deleted Sandbox's snapshot is still on the node: %v", err)
	}
	t.Logf("snapshot of the deleted Sandbox collected after %s", time.Since(start).Round(time.Second))
}

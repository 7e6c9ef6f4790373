package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
	"sigs.k8s.io/agent-sandbox/internal/platform"
)

const pythonRuntimeImage = "localhost/agent-sandbox/python-runtime:dev"

// counterScript holds state only in memory (a counter, bytes touched), an
// open file (written once at start, read back through the same descriptor)
// and a listening socket that reports all three.
const counterScript = `
import os, socket, sys, threading, time
mib = int(sys.argv[1])
token = os.urandom(6).hex()  # differs on every clean start
buf = bytearray(mib << 20)
for i in range(0, len(buf), 4096): buf[i] = 7
f = open("/tmp/state.txt", "w+"); f.write("opened-before-suspend"); f.flush()
n = 0
def count():
    global n
    while True:
        n += 1; time.sleep(0.05)
threading.Thread(target=count, daemon=True).start()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(16)
while True:
    c, _ = s.accept(); c.recv(4096)
    f.seek(0)
    body = "%d %d %s %d %s" % (os.getpid(), n, f.read(), buf[4096 * 3], token)
    c.sendall(("HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode()); c.close()
`

func counterPod(name string, mib int, annotations map[string]string) *corev1.Pod {
	grace := int64(1)
	no := false
	gvisor := "gvisor"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations,
			Labels: map[string]string{"app.kubernetes.io/part-of": "agent-sandbox-e2e"}},
		Spec: corev1.PodSpec{
			RuntimeClassName:              &gvisor,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "app",
				Image:           pythonRuntimeImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"python3", "-c", counterScript, strconv.Itoa(mib)},
				Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

type counterState struct {
	pid, n    int
	file, mem string
	token     string
}

func readCounter(ctx context.Context, t *testing.T, podIP string) counterState {
	t.Helper()
	f := strings.Fields(httpGet(ctx, t, "http://"+podIP+":8080/"))
	if len(f) != 5 {
		t.Fatalf("counter answered %q", f)
	}
	pid, _ := strconv.Atoi(f[0])
	n, _ := strconv.Atoi(f[1])
	return counterState{pid: pid, n: n, file: f[2], mem: f[3], token: f[4]}
}

// asController returns a Pod client that authenticates as the controller's
// ServiceAccount: the hibernation admission policy `up` installs lets only
// that identity create a Pod with the restore annotation.
func asController(tb testing.TB) typedcorev1.PodInterface {
	tb.Helper()
	cfg := *restConfig
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + platform.Namespace + ":agent-sandbox-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + platform.Namespace, "system:authenticated"},
	}
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return cs.CoreV1().Pods(metav1.NamespaceDefault)
}

// snapshotOwner creates a Suspended Sandbox (it never gets a Pod) and returns
// its UID, for the snapshots this file checkpoints itself. The node agent's
// garbage collection deletes every snapshot whose Sandbox does not exist
// under the recorded UID, so a made-up owner would lose its snapshot to a
// collection pass that lands between checkpoint and restore (it did, in CI).
func snapshotOwner(tb testing.TB, name string) string {
	tb.Helper()
	c := ensureController(tb)
	sb := counterSandbox(name, 1, false)
	sb.Spec.OperatingMode = sandboxv1beta1.OperatingModeSuspended
	if err := c.Create(context.Background(), sb); err != nil {
		tb.Fatalf("creating the snapshot owner %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if err := c.Delete(context.Background(), sb); err != nil && !apierrors.IsNotFound(err) {
			tb.Errorf("deleting the snapshot owner %s: %v", name, err)
		}
	})
	return string(sb.UID)
}

// checkpointedCounter is a counter Pod on the node, Ready and read once,
// with a snapshot ID of its own and a real owner for it (snapshotOwner), for
// the tests that checkpoint a Pod themselves with the node agent's code.
type checkpointedCounter struct {
	cp        hibernate.Checkpointer
	snap      string
	ownerName string
	ownerUID  string
	pod       *corev1.Pod // as it turned Ready
	before    counterState
}

// startCounter creates the counter Pod name (64 MiB touched) and the owner
// Sandbox name+"-owner", waits until the Pod is Ready and reads it. The
// snapshot, the Pod and the owner are removed when the test ends.
func startCounter(ctx context.Context, t *testing.T, name string) *checkpointedCounter {
	t.Helper()
	c := &checkpointedCounter{cp: hibernateCheckpointer(), snap: fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano()), ownerName: name + "-owner"}
	t.Cleanup(func() { _ = c.cp.Store.DeleteSnapshot(metav1.NamespaceDefault, c.snap) })
	c.ownerUID = snapshotOwner(t, c.ownerName)
	orig, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, counterPod(name, 64, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, name) })
	c.pod = waitPodReady(ctx, t, orig.Name)
	c.before = readCounter(ctx, t, c.pod.Status.PodIP)
	return c
}

// checkpoint saves the Pod with UID podUID into the counter's snapshot, as
// the node agent does for a suspend.
func (c *checkpointedCounter) checkpoint(ctx context.Context, podUID types.UID) (hibernate.Meta, error) {
	return c.cp.Checkpoint(ctx, hibernate.Request{PodUID: string(podUID), Namespace: metav1.NamespaceDefault,
		SandboxName: c.ownerName, SandboxUID: c.ownerUID, SnapshotID: c.snap})
}

func hibernateCheckpointer() hibernate.Checkpointer {
	cfg := localcluster.DefaultConfig()
	return hibernate.Checkpointer{
		Store:     hibernate.Store{Root: cfg.HibernateDir()},
		Runsc:     filepath.Join(cfg.CacheDir, "bin", "gvisor-"+localcluster.GVisorVersion, "runsc"),
		RunscRoot: filepath.Join(cfg.RunDir, "runsc", "k8s.io"),
		TaskDir:   filepath.Join(cfg.RunDir, "containerd", "io.containerd.runtime.v2.task", "k8s.io"),
	}
}

func waitRestoreResult(ctx context.Context, t *testing.T, st hibernate.Store, podUID string, want ...string) hibernate.Result {
	t.Helper()
	var res hibernate.Result
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		r, err := st.ReadResult(podUID)
		if err != nil {
			return false, nil //nolint:nilerr // no result written yet: poll on
		}
		res = r
		for _, w := range want {
			if r.State == w {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("restore result for pod %s: last %+v, want %v: %v", podUID, res, want, err)
	}
	return res
}

// TestDeepHibernationPodRestore checkpoints a real gVisor Pod on the node
// (the node agent's code), deletes the Pod, and starts a new Pod carrying
// the restore annotation: the hibernation shim restores it, and the same
// Python process (same PID) goes on counting with its memory, its open file
// and its listening socket. Then a truncated snapshot: the shim refuses it,
// records a Fallback and the Pod starts clean instead of hanging.
func TestDeepHibernationPodRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
	counter := startCounter(ctx, t, "hib-counter")
	cp, snap, ready, before := counter.cp, counter.snap, counter.pod, counter.before
	if before.file != "opened-before-suspend" || before.mem != "7" {
		t.Fatalf("counter before suspend: %+v", before)
	}

	start := time.Now()
	meta, err := counter.checkpoint(ctx, ready.UID)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	t.Logf("checkpoint of a 64 MiB counter: %v, %d MiB", time.Since(start).Round(time.Millisecond), meta.Size()>>20)
	deletePod(t, ready.Name)

	restored, err := asController(t).Create(ctx, counterPod("hib-counter-restored", 64,
		map[string]string{hibernate.AnnotationRestoreSnapshot: snap}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, "hib-counter-restored") })
	ready = waitPodReady(ctx, t, restored.Name)
	after := readCounter(ctx, t, ready.Status.PodIP)
	t.Logf("before %+v after %+v", before, after)
	if res, err := cp.Store.ReadResult(string(restored.UID)); err != nil {
		id, ferr := cp.FindPodSandbox(string(restored.UID))
		b, _ := os.ReadFile(filepath.Join(cp.TaskDir, id, "config.json"))
		t.Fatalf("no shim result for the restored pod (%v); its pod sandbox %s (%v) has OCI spec %.3000s", err, id, ferr, b)
	} else {
		t.Logf("shim result: %+v", res)
	}
	if after.token != before.token || after.pid != before.pid || after.n < before.n || after.file != before.file || after.mem != before.mem {
		t.Fatalf("not the same process: before %+v, after %+v", before, after)
	}
	if r := waitRestoreResult(ctx, t, cp.Store, string(restored.UID), hibernate.StateRestored, hibernate.StateFallback); r.State != hibernate.StateRestored {
		t.Fatalf("shim result %+v, want Restored", r)
	}
	// The counting thread (asleep in time.sleep at the checkpoint) must
	// wake up and go on in the restored process.
	var later counterState
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	err = wait.PollUntilContextCancel(cctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		later = readCounter(ctx, t, ready.Status.PodIP)
		return later.n > after.n, nil
	})
	ccancel()
	if err != nil || later.token != before.token {
		t.Fatalf("counter stopped after restore: %d, then %+v (%v)", after.n, later, err)
	}

	// The node agent `up` runs (a host process on this node) reports the
	// shim's result on the Pod for the controller, then drops the consumed
	// snapshot.
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, restored.Name, metav1.GetOptions{})
		return err == nil && p.Annotations[hibernate.AnnotationRestoreResult] != "", nil
	})
	if err != nil {
		t.Fatalf("the node agent did not report the restore: %v", err)
	}
	p, _ := pods.Get(ctx, restored.Name, metav1.GetOptions{})
	if r, err := hibernate.DecodeResult(p.Annotations[hibernate.AnnotationRestoreResult]); err != nil || r.State != hibernate.StateRestored {
		t.Fatalf("agent reported %q (%v)", p.Annotations[hibernate.AnnotationRestoreResult], err)
	}
	if _, err := cp.Store.ReadMeta(metav1.NamespaceDefault, snap); !hibernate.IsNotExist(err) {
		t.Fatalf("consumed snapshot still there: %v", err)
	}

	// Truncated snapshot: checkpoint the restored Pod, cut its pages file,
	// start a Pod from it. The shim must refuse and start it clean.
	if _, err := counter.checkpoint(ctx, restored.UID); err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	deletePod(t, restored.Name)
	dir, _ := cp.Store.SnapshotDir(metav1.NamespaceDefault, snap)
	if err := os.Truncate(filepath.Join(dir, "pages.img"), 4096); err != nil {
		t.Fatal(err)
	}
	clean, err := asController(t).Create(ctx, counterPod("hib-counter-truncated", 64,
		map[string]string{hibernate.AnnotationRestoreSnapshot: snap}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, "hib-counter-truncated") })
	ready = waitPodReady(ctx, t, clean.Name)
	r := waitRestoreResult(ctx, t, cp.Store, string(clean.UID), hibernate.StateFallback, hibernate.StateRestored)
	if r.State != hibernate.StateFallback || !strings.Contains(r.Reason, "truncated") {
		t.Fatalf("truncated snapshot: shim result %+v, want Fallback (truncated)", r)
	}
	fresh := readCounter(ctx, t, ready.Status.PodIP)
	// A clean start draws a new token. The count says nothing here: it
	// ticks every 50 ms, so a fresh process reaches the restored one's
	// count within a second (it did, in CI: 20 and 20).
	if fresh.token == later.token {
		t.Fatalf("truncated snapshot: the counter was not started clean (token %s, count %d; before %s, %d)", fresh.token, fresh.n, later.token, later.n)
	}
}

// BenchmarkDeepHibernation measures, on real gVisor pods, per touched
// memory size: the checkpoint (suspend) time and snapshot size, the time
// from creating the restoring Pod to the restored process's first answer,
// and beside it today's filesystem-only resume (a fresh Pod to the first
// answer of a newly started process). Run under the e2e lock:
//
//	flock /tmp/agent-sandbox-e2e.lock go test -count=1 -p 1 -run '^$' -bench BenchmarkDeepHibernation -benchtime 1x ./test/e2e/
func BenchmarkDeepHibernation(b *testing.B) {
	for _, mib := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchHibernateOnce(b, mib, false)
			}
		})
	}
	// Real heaps hold committed pages that are zero again (freed arenas,
	// cleared buffers); the sizes above touch every page with data.
	b.Run("256MiB-half-zeroed", func(b *testing.B) {
		if halfZeroedScript == counterScript {
			b.Fatal("halfZeroedScript no longer changes counterScript's touch loop")
		}
		for i := 0; i < b.N; i++ {
			benchHibernateOnce(b, 256, true)
		}
	})
}

// halfZeroedScript is counterScript whose buffer's second half is written
// and then zeroed again: committed pages that hold only zeros.
var halfZeroedScript = strings.Replace(counterScript,
	"for i in range(0, len(buf), 4096): buf[i] = 7\n",
	"for i in range(0, len(buf), 4096): buf[i] = 7\nfor i in range(len(buf) // 2, len(buf), 4096): buf[i] = 0\n", 1)

func benchHibernateOnce(b *testing.B, mib int, zeroHalf bool) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp := hibernateCheckpointer()
	pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
	snap := fmt.Sprintf("bench-hib-%d", time.Now().UnixNano())
	defer func() { _ = cp.Store.DeleteSnapshot(metav1.NamespaceDefault, snap) }()
	name := fmt.Sprintf("hib-bench-%d", mib)
	owner := snapshotOwner(b, snap)
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	tb := &benchT{B: b}
	create := func(n string, ann map[string]string) (*corev1.Pod, time.Duration, counterState) {
		start := time.Now()
		create := pods.Create
		if ann != nil {
			create = asController(b).Create
		}
		pod := counterPod(n, mib, ann)
		if zeroHalf {
			pod.Spec.Containers[0].Command[2] = halfZeroedScript
		}
		p, err := create(ctx, pod, metav1.CreateOptions{})
		must(err)
		st := waitFirstAnswer(ctx, b, n)
		return p, time.Since(start), st
	}
	orig, cold, before := create(name, nil)
	start := time.Now()
	meta, err := cp.Checkpoint(ctx, hibernate.Request{PodUID: string(orig.UID), Namespace: metav1.NamespaceDefault,
		SandboxName: snap, SandboxUID: owner, SnapshotID: snap})
	must(err)
	suspend := time.Since(start)
	// What a deep suspend pays after the checkpoint: the Pod's deletion,
	// whose sandbox the checkpoint has already stopped.
	cpDelete := deletePodB(tb, name)
	_, resume, after := create(name+"-r", map[string]string{hibernate.AnnotationRestoreSnapshot: snap})
	if after.token != before.token {
		b.Fatalf("%d MiB: the resumed Pod was not restored (token %s, was %s)", mib, after.token, before.token)
	}
	// The restored Pod runs: its deletion is an ordinary one, the baseline.
	runDelete := deletePodB(tb, name+"-r")
	b.ReportMetric(suspend.Seconds(), "suspend-s")
	b.ReportMetric(cpDelete.Seconds(), "checkpointed-pod-delete-s")
	b.ReportMetric(runDelete.Seconds(), "running-pod-delete-s")
	b.ReportMetric(resume.Seconds(), "resume-to-answer-s")
	b.ReportMetric(cold.Seconds(), "fs-only-resume-to-answer-s")
	b.ReportMetric(float64(meta.Size())/(1<<20), "snapshot-MiB")
	kind := ""
	if zeroHalf {
		kind = " (half zeroed)"
	}
	fmt.Printf("deep hibernation %5d MiB touched%s: checkpoint %6.2fs, snapshot %5d MiB, delete of the checkpointed pod %5.2fs (of a running pod %5.2fs), restore to first answer %5.2fs; filesystem-only resume (fresh pod, process start, %d MiB touch) to first answer %5.2fs\n",
		mib, kind, suspend.Seconds(), meta.Size()>>20, cpDelete.Seconds(), runDelete.Seconds(), resume.Seconds(), mib, cold.Seconds())
}

// benchT lets the test helpers that take *testing.T report into a benchmark.
type benchT struct{ *testing.B }

// deletePodB deletes the Pod and returns the time from the delete call
// until the apiserver no longer has it (the kubelet has stopped its
// containers and removed its sandbox).
func deletePodB(b *benchT, name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
	start := time.Now()
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		b.Fatalf("delete pod %s: %v", name, err)
	}
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		b.Fatalf("pod %s still there %v after its deletion: %v", name, time.Since(start), err)
	}
	return time.Since(start)
}

// waitFirstAnswer polls the Pod until it has an IP and the counter answers.
func waitFirstAnswer(ctx context.Context, b *testing.B, name string) counterState {
	b.Helper()
	var st counterState
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := clientset.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.PodIP == "" {
			return false, nil
		}
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+p.Status.PodIP+":8080/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		f := strings.Fields(string(body))
		if len(f) != 5 {
			return false, nil
		}
		st.pid, _ = strconv.Atoi(f[0])
		st.n, _ = strconv.Atoi(f[1])
		st.file, st.mem, st.token = f[2], f[3], f[4]
		return true, nil
	})
	if err != nil {
		b.Fatalf("pod %s never answered: %v", name, err)
	}
	return st
}

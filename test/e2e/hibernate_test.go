package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"sigs.k8s.io/agent-sandbox/internal/hibernate"
	"sigs.k8s.io/agent-sandbox/internal/localcluster"
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
			return false, nil
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
	cp := hibernateCheckpointer()
	pods := clientset.CoreV1().Pods(metav1.NamespaceDefault)
	snap := fmt.Sprintf("e2e-hib-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = cp.Store.DeleteSnapshot(metav1.NamespaceDefault, snap) })

	orig, err := pods.Create(ctx, counterPod("hib-counter", 64, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePod(t, "hib-counter") })
	ready := waitPodReady(ctx, t, orig.Name)
	before := readCounter(ctx, t, ready.Status.PodIP)
	if before.file != "opened-before-suspend" || before.mem != "7" {
		t.Fatalf("counter before suspend: %+v", before)
	}

	start := time.Now()
	meta, err := cp.Checkpoint(ctx, hibernate.Request{PodUID: string(orig.UID), Namespace: metav1.NamespaceDefault,
		SandboxName: "hib-counter", SandboxUID: "e2e", SnapshotID: snap})
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	t.Logf("checkpoint of a 64 MiB counter: %v, %d MiB", time.Since(start).Round(time.Millisecond), meta.Size()>>20)
	deletePod(t, orig.Name)

	restored, err := pods.Create(ctx, counterPod("hib-counter-restored", 64,
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
	later := readCounter(ctx, t, ready.Status.PodIP)
	if later.n <= after.n {
		t.Fatalf("counter stopped after restore: %d then %d", after.n, later.n)
	}

	// Truncated snapshot: checkpoint the restored Pod, cut its pages file,
	// start a Pod from it. The shim must refuse and start it clean.
	if _, err := cp.Checkpoint(ctx, hibernate.Request{PodUID: string(restored.UID), Namespace: metav1.NamespaceDefault,
		SandboxName: "hib-counter", SandboxUID: "e2e", SnapshotID: snap}); err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	deletePod(t, restored.Name)
	dir, _ := cp.Store.SnapshotDir(metav1.NamespaceDefault, snap)
	if err := os.Truncate(filepath.Join(dir, "pages.img"), 4096); err != nil {
		t.Fatal(err)
	}
	clean, err := pods.Create(ctx, counterPod("hib-counter-truncated", 64,
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
	if fresh.token == later.token || fresh.n >= later.n {
		t.Fatalf("truncated snapshot: counter %d did not start over (was %d)", fresh.n, later.n)
	}
}

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
)

// Deep hibernation with the snapshot on the Sandbox's own volume
// (status.memorySnapshot.volume): stored there, restored from there, and
// refused when anything on the volume changed it. The test writes to the
// volume through its host directory (the local-path provisioner's
// hostPath), which is exactly what the Sandbox's own processes, or any Pod
// mounting the claim, can write.

// volumeSnapshotDir is where the snapshot of sb lies on the node.
func volumeSnapshotDir(t *testing.T, sb *sandboxv1beta1.Sandbox) string {
	t.Helper()
	snap := sb.Status.MemorySnapshot
	if snap == nil || snap.Volume != "data" || snap.VolumePath == "" || !strings.HasPrefix(snap.Digest, "sha256:") {
		t.Fatalf("memorySnapshot is not on the volume: %+v (%s)", snap, memoryReason(sb))
	}
	if strings.Contains(snap.VolumePath, hibernate.PodUIDPlaceholder) {
		t.Fatalf("the local-path volume should have a stable host path: %s", snap.VolumePath)
	}
	return filepath.Join(snap.VolumePath, hibernate.VolumeSnapshotDir, snap.ID)
}

func createVolumeSandbox(t *testing.T, c client.Client, name string) (*sandboxv1beta1.Sandbox, counterState, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Create(ctx, counterSandbox(name, 64, true)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteSandbox(t, c, name)
		waitGone(t, c, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "data-" + name}})
	})
	sb := waitSandboxReady(t, c, name)
	before := readCounter(ctx, t, sb.Status.PodIPs[0])
	marker := execInPod(ctx, t, name, "cat", "/data/marker")
	if strings.TrimSpace(marker) == "" {
		t.Fatal("no marker written to the volume")
	}
	return sb, before, marker
}

// TestDeepHibernationSnapshotOnVolume: the snapshot of a Sandbox with a
// PersistentVolumeClaim is written onto that volume (not the node store),
// the resumed Pod restores from it (same process, same files) and the
// snapshot is consumed from the volume.
func TestDeepHibernationSnapshotOnVolume(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const name = "hib-pvc"
	_, before, marker := createVolumeSandbox(t, c, name)
	sb, took := suspendDeep(t, c, name)
	dir := volumeSnapshotDir(t, sb)
	if fi, err := os.Lstat(filepath.Join(dir, "pages.img")); err != nil || fi.Size() < 64<<20 {
		t.Fatalf("no pages on the volume at %s: %v %v", dir, fi, err)
	}
	if _, err := hibernateCheckpointer().Store.ReadMeta(metav1.NamespaceDefault, string(sb.UID)); !hibernate.IsNotExist(err) {
		t.Fatalf("a volume Sandbox's snapshot is (also) in the node store: %v", err)
	}
	t.Logf("suspend took %s: %s", took.Round(time.Millisecond), memoryReason(sb))

	start := time.Now()
	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
	sb = waitSandboxReady(t, c, name)
	after := readCounter(ctx, t, sb.Status.PodIPs[0])
	t.Logf("resume to first answer: %s", time.Since(start).Round(time.Millisecond))
	if after.token != before.token || after.pid != before.pid || after.n < before.n || after.file != before.file {
		t.Fatalf("not the same process: before %+v, after %+v (%s)", before, after, memoryReason(getSandbox(t, c, name)))
	}
	if again := execInPod(ctx, t, name, "cat", "/data/marker"); again != marker {
		t.Errorf("volume data lost: %q then %q", marker, again)
	}
	waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonRestoredFromSnapshot, time.Minute)
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("the consumed snapshot is still on the volume: %v", err)
	}
}

// TestDeepHibernationVolumeSnapshotTampered performs the attacks on a
// snapshot that sits in tenant-writable storage: a modified image file
// (same size), and another Sandbox's genuine snapshot planted under this
// Sandbox's name. Both are refused (SnapshotRestoreFailed), and the
// Sandbox starts clean with its volume's files.
func TestDeepHibernationVolumeSnapshotTampered(t *testing.T) {
	c := ensureController(t)
	resumeRefused := func(t *testing.T, name, marker string, before counterState, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
		sb := waitSandboxReady(t, c, name)
		fresh := readCounter(ctx, t, sb.Status.PodIPs[0])
		if fresh.token == before.token {
			t.Fatalf("a tampered snapshot was restored: before %+v, after %+v", before, fresh)
		}
		sb = waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonSnapshotRestoreFailed, time.Minute)
		cond := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionMemorySnapshot)
		if !strings.Contains(cond.Message, want) || sb.Status.MemorySnapshot != nil {
			t.Errorf("condition %q (want it to say %q), memorySnapshot %+v", cond.Message, want, sb.Status.MemorySnapshot)
		}
		if again := execInPod(ctx, t, name, "cat", "/data/marker"); again != marker {
			t.Errorf("volume data lost: %q then %q", marker, again)
		}
		t.Logf("refused: %s", cond.Message)
	}

	t.Run("modified pages", func(t *testing.T) {
		const name = "hib-pvc-mod"
		_, before, marker := createVolumeSandbox(t, c, name)
		sb, _ := suspendDeep(t, c, name)
		pages := filepath.Join(volumeSnapshotDir(t, sb), "pages.img")
		f, err := os.OpenFile(pages, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Overwrite one page in the middle: same size, other content.
		fi, _ := f.Stat()
		if _, err := f.WriteAt(make([]byte, 4096), fi.Size()/2&^4095); err != nil {
			t.Fatal(err)
		}
		f.Close()
		resumeRefused(t, name, marker, before, "does not match its recorded SHA-256")
	})

	t.Run("another Sandbox's snapshot planted", func(t *testing.T) {
		const victim, other = "hib-pvc-victim", "hib-pvc-other"
		_, before, marker := createVolumeSandbox(t, c, victim)
		createVolumeSandbox(t, c, other)
		sbV, _ := suspendDeep(t, c, victim)
		sbO, _ := suspendDeep(t, c, other)
		dirV, dirO := volumeSnapshotDir(t, sbV), volumeSnapshotDir(t, sbO)
		if err := os.RemoveAll(dirV); err != nil {
			t.Fatal(err)
		}
		// Same filesystem (both local-path volumes): the other's complete,
		// genuine snapshot now sits where the victim's was.
		if err := os.Rename(dirO, dirV); err != nil {
			t.Fatal(err)
		}
		resumeRefused(t, victim, marker, before, "does not match the digest")
	})
}

// TestDeepHibernationCheckpointDiskFull: the snapshot's destination on the
// node fills up during the checkpoint (a 16 MiB tmpfs mounted over the
// namespace's snapshot directory, for a 64 MiB process): CheckpointFailed
// condition and event, no partial files left, the Pod is deleted anyway
// (filesystem-only suspend) and resume starts clean.
func TestDeepHibernationCheckpointDiskFull(t *testing.T) {
	c := ensureController(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st := hibernateCheckpointer().Store
	nsDir := filepath.Join(st.Root, "snapshots", metav1.NamespaceDefault)
	if err := os.MkdirAll(nsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", nsDir, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
		t.Fatalf("mounting a small tmpfs at %s: %v", nsDir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(nsDir, 0); err != nil {
			t.Errorf("unmounting %s: %v", nsDir, err)
		}
	})
	const name = "hib-full"
	if err := c.Create(ctx, counterSandbox(name, 64, false)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSandbox(t, c, name) })
	sb := waitSandboxReady(t, c, name)
	before := readCounter(ctx, t, sb.Status.PodIPs[0])

	_, took := suspendDeep(t, c, name)
	sb = waitMemoryCondition(t, c, name, sandboxv1beta1.ReasonCheckpointFailed, time.Minute)
	cond := meta.FindStatusCondition(sb.Status.Conditions, sandboxv1beta1.SandboxConditionMemorySnapshot)
	t.Logf("suspend on a full disk took %s: %s", took.Round(time.Millisecond), cond.Message)
	if !strings.Contains(cond.Message, "no space left") || sb.Status.MemorySnapshot != nil {
		t.Fatalf("condition %q, memorySnapshot %+v", cond.Message, sb.Status.MemorySnapshot)
	}
	if left, _ := os.ReadDir(nsDir); len(left) != 0 {
		t.Fatalf("partial snapshot files left on the full disk: %v", left)
	}
	// The Pod is gone; the controller's next pass records Suspended.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		sb = getSandbox(t, c, name)
		return meta.IsStatusConditionTrue(sb.Status.Conditions, sandboxv1beta1.SandboxConditionSuspended), nil
	}); err != nil {
		t.Fatalf("not suspended: %+v", sb.Status.Conditions)
	}
	var events corev1.EventList
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, &events, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.UID == sb.UID && e.Reason == sandboxv1beta1.ReasonCheckpointFailed {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no %s event for the Sandbox: %v", sandboxv1beta1.ReasonCheckpointFailed, err)
	}

	setOperatingMode(t, c, name, sandboxv1beta1.OperatingModeRunning)
	sb = waitSandboxReady(t, c, name)
	if fresh := readCounter(ctx, t, sb.Status.PodIPs[0]); fresh.token == before.token {
		t.Fatalf("not a clean start: %+v", fresh)
	}
}

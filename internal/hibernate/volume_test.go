package hibernate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeNode lays out containerd's task dir for one Pod whose app container
// mounts volume "data" at /data from hostVol, and a runsc stand-in that
// writes two image files into --image-path.
func fakeNode(t *testing.T, podUID, hostVol string) Checkpointer {
	t.Helper()
	root := t.TempDir()
	tasks := filepath.Join(root, "tasks")
	spec := func(id string, v any) {
		if err := os.MkdirAll(filepath.Join(tasks, id), 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(tasks, id, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec("pause1", map[string]any{"annotations": map[string]string{annoContainerType: "sandbox", annoSandboxUID: podUID}})
	spec("app1", map[string]any{
		"annotations": map[string]string{annoContainerType: "container", annoSandboxID: "pause1", annoContainerName: "app"},
		"mounts":      []map[string]string{{"destination": "/etc/hosts", "source": "/somewhere/hosts"}, {"destination": "/data", "source": hostVol}},
	})
	// Another Pod's container with the same name must never be picked.
	spec("app2", map[string]any{
		"annotations": map[string]string{annoContainerType: "container", annoSandboxID: "pause2", annoContainerName: "app"},
		"mounts":      []map[string]string{{"destination": "/data", "source": "/other/volume"}},
	})
	runsc := filepath.Join(root, "runsc")
	script := "#!/bin/sh\nfor a; do case $a in --image-path=*) d=${a#--image-path=};; esac; done\nprintf state > $d/checkpoint.img\nprintf pages > $d/pages.img\n"
	if err := os.WriteFile(runsc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Checkpointer{Store: Store{Root: filepath.Join(root, "store")}, Runsc: runsc, RunscRoot: root, TaskDir: tasks}
}

func claimPod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "pod-uid-1", Namespace: "ns"}, Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "scratch"}, {Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-sb"}}}},
		Containers: []corev1.Container{{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
	}}
}

func TestFindVolumeFromTheContainersMounts(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "pods", "pod-uid-1", "volumes", "kubernetes.io~csi", "pv-1", "mount")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	c := fakeNode(t, "pod-uid-1", vol)
	v, err := c.FindVolume(claimPod("pod-uid-1"), "pause1")
	if err != nil || v == nil || v.Name != "data" || v.HostPath != vol ||
		v.Ref != strings.Replace(vol, "/pod-uid-1/", "/"+PodUIDPlaceholder+"/", 1) {
		t.Fatalf("FindVolume = %+v, %v", v, err)
	}
	// No claim: the node store.
	p := claimPod("pod-uid-1")
	p.Spec.Volumes = p.Spec.Volumes[:1]
	if v, err := c.FindVolume(p, "pause1"); v != nil || err != nil {
		t.Fatalf("without a claim: %+v, %v", v, err)
	}
	// A subPath mount is not the volume's root: not used.
	p = claimPod("pod-uid-1")
	p.Spec.Containers[0].VolumeMounts[0].SubPath = "x"
	if v, err := c.FindVolume(p, "pause1"); v != nil || err != nil {
		t.Fatalf("subPath mount: %+v, %v", v, err)
	}
}

// The checkpoint of a Pod with a claim ends on its volume, with every file's
// SHA-256 in meta.json and the digest of meta.json returned; nothing stays
// in the node store.
func TestCheckpointOntoVolume(t *testing.T) {
	vol := t.TempDir()
	c := fakeNode(t, "pod-uid-1", vol)
	v, err := c.FindVolume(claimPod("pod-uid-1"), "pause1")
	if err != nil || v == nil {
		t.Fatalf("FindVolume: %+v %v", v, err)
	}
	m, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-uid-1", Namespace: "ns", SandboxName: "sb", SandboxUID: "sb-uid", SnapshotID: "sb-uid", Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(vol, VolumeSnapshotDir, "sb-uid")
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	if MetaDigest(b) != m.Digest || !strings.HasPrefix(m.Digest, "sha256:") {
		t.Fatalf("digest %q does not match meta.json", m.Digest)
	}
	sum := sha256.Sum256([]byte("pages"))
	if m.SHA256["pages.img"] != hex.EncodeToString(sum[:]) || len(m.SHA256) != 2 || m.Files["pages.img"] != 5 {
		t.Fatalf("meta %+v", m)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pages.img")); string(got) != "pages" {
		t.Fatalf("pages.img on the volume: %q", got)
	}
	left, _ := filepath.Glob(filepath.Join(c.Store.Root, "snapshots", "ns", "*"))
	if len(left) != 0 {
		t.Fatalf("left in the node store: %v", left)
	}
}

// A tenant who plants a symlink where the agent publishes (the hidden
// directory, or the snapshot's own name) cannot make the agent write
// outside the volume.
func TestPublishToVolumeStaysInsideTheVolume(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, vol, outside string){
		"hidden dir is a symlink out": func(t *testing.T, vol, outside string) {
			t.Helper()
			if err := os.Symlink(outside, filepath.Join(vol, VolumeSnapshotDir)); err != nil {
				t.Fatal(err)
			}
		},
		"snapshot name is a symlink out": func(t *testing.T, vol, outside string) {
			t.Helper()
			if err := os.MkdirAll(filepath.Join(vol, VolumeSnapshotDir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(vol, VolumeSnapshotDir, "sb-uid")); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			vol, outside := t.TempDir(), t.TempDir()
			keep := filepath.Join(outside, "precious")
			if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			plant(t, vol, outside)
			c := fakeNode(t, "pod-uid-1", vol)
			_, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-uid-1", Namespace: "ns", SandboxUID: "sb-uid", SnapshotID: "sb-uid",
				Volume: &Volume{Name: "data", HostPath: vol, Ref: vol}})
			entries, _ := os.ReadDir(outside)
			if len(entries) != 1 || entries[0].Name() != "precious" {
				t.Fatalf("the agent wrote outside the volume (err %v): %v", err, entries)
			}
			if err == nil {
				// Published: then it must be a real directory inside the volume.
				fi, lerr := os.Lstat(filepath.Join(vol, VolumeSnapshotDir, "sb-uid"))
				if lerr != nil || !fi.IsDir() {
					t.Fatalf("published, but not as a directory in the volume: %v %v", fi, lerr)
				}
			}
			left, _ := filepath.Glob(filepath.Join(c.Store.Root, "snapshots", "ns", "*"))
			if len(left) != 0 {
				t.Fatalf("left in the node store: %v", left)
			}
		})
	}
}

func TestRestoreRefRoundTrip(t *testing.T) {
	for _, r := range []RestoreRef{{ID: "uid"}, {ID: "uid", Digest: "sha256:00", VolumePath: "/a;b/c"}} {
		got, err := ParseRestoreRef(r.Encode())
		if err != nil || got != r {
			t.Fatalf("round trip of %+v: %+v %v", r, got, err)
		}
	}
	if _, err := ParseRestoreRef("uid;digest=sha256:00"); err == nil {
		t.Fatal("a volume reference without a path was accepted")
	}
}

// A volume on another filesystem than the node store gets a copy, published
// by rename inside the volume; nothing stays in the node store.
func TestCheckpointOntoVolumeOnAnotherFilesystem(t *testing.T) {
	vol, err := os.MkdirTemp("/dev/shm", "hib-vol-")
	if err != nil {
		t.Fatalf("a tmpfs directory for the volume: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(vol) })
	c := fakeNode(t, "pod-uid-1", vol)
	m, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-uid-1", Namespace: "ns", SandboxUID: "sb-uid", SnapshotID: "sb-uid",
		Volume: &Volume{Name: "data", HostPath: vol, Ref: vol}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(vol, VolumeSnapshotDir, "sb-uid")
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil || MetaDigest(b) != m.Digest {
		t.Fatalf("meta.json on the volume: %v (digest %s)", err, m.Digest)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "pages.img")); string(got) != "pages" {
		t.Fatalf("pages.img on the volume: %q", got)
	}
	if _, err := os.Stat(dir + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("partial copy left on the volume: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(c.Store.Root, "snapshots", "ns", "*"))
	if len(left) != 0 {
		t.Fatalf("left in the node store: %v", left)
	}
}

// An agent that cannot reach the volume's host path (e.g. a DaemonSet that
// does not mount it) keeps the snapshot in the node store instead of
// failing the checkpoint; status then says where it is.
func TestUnreachableVolumeFallsBackToTheNodeStore(t *testing.T) {
	c := fakeNode(t, "pod-uid-1", filepath.Join(t.TempDir(), "not-mounted-here"))
	a := &Agent{Checkpointer: c}
	v, err := a.volumeOf(claimPod("pod-uid-1"))
	if err != nil || v != nil {
		t.Fatalf("volumeOf = %+v, %v; want the node store", v, err)
	}
	vol := t.TempDir()
	a.Checkpointer = fakeNode(t, "pod-uid-1", vol)
	if v, err := a.volumeOf(claimPod("pod-uid-1")); err != nil || v == nil || v.HostPath != vol {
		t.Fatalf("reachable volume: %+v, %v", v, err)
	}
}

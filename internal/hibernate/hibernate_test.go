package hibernate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSnapshotDirRefusesUnsafeReferences(t *testing.T) {
	s := Store{Root: "/store"}
	for _, bad := range [][2]string{{"ns", "../other/uid"}, {"..", "uid"}, {"ns", "a/b"}, {"ns", ""}, {"NS", "uid"}, {"ns", "."}} {
		if _, err := s.SnapshotDir(bad[0], bad[1]); err == nil {
			t.Errorf("SnapshotDir(%q, %q) accepted", bad[0], bad[1])
		}
	}
	d, err := s.SnapshotDir("team-a", "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")
	if err != nil || d != "/store/snapshots/team-a/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0" {
		t.Fatalf("SnapshotDir = %q, %v", d, err)
	}
}

// A checkpoint that fails part-way (here: the disk fills) leaves no files
// behind and never publishes a snapshot.
func TestCheckpointFailureLeavesNothing(t *testing.T) {
	root := t.TempDir()
	tasks := filepath.Join(root, "tasks")
	if err := os.MkdirAll(filepath.Join(tasks, "pause1"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := `{"annotations":{"io.kubernetes.cri.container-type":"sandbox","io.kubernetes.cri.sandbox-uid":"pod-uid-1"}}`
	if err := os.WriteFile(filepath.Join(tasks, "pause1", "config.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stands in for runsc: writes part of an image, then fails like a full disk.
	runsc := filepath.Join(root, "runsc")
	script := "#!/bin/sh\nfor a; do case $a in --image-path=*) d=${a#--image-path=};; esac; done\nhead -c 4096 /dev/zero > $d/pages.img\necho 'write: no space left on device' >&2\necho 'goroutine 1 [running]:' >&2\nexit 1\n"
	if err := os.WriteFile(runsc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := Checkpointer{Store: Store{Root: filepath.Join(root, "store")}, Runsc: runsc, RunscRoot: root, TaskDir: tasks}
	_, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-uid-1", Namespace: "ns", SnapshotID: "sb-uid"})
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Checkpoint error = %v, want the runtime's ENOSPC", err)
	}
	if strings.Contains(err.Error(), "goroutine") {
		t.Fatalf("Checkpoint error = %q, want the error line without runsc's stacks", err)
	}
	left, _ := filepath.Glob(filepath.Join(root, "store", "snapshots", "ns", "*"))
	if len(left) != 0 {
		t.Fatalf("files left behind: %v", left)
	}
	// The Pod is found by UID only.
	if _, err := c.FindPodSandbox("pod-uid-2"); err == nil {
		t.Fatal("found a sandbox for another pod UID")
	}
}

func TestAgentActsOnlyForSandboxPods(t *testing.T) {
	tr := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationCheckpointRequested: "x"}}}
	if !wants(p) {
		t.Fatal("a checkpoint request without a result must be wanted")
	}
	if _, ok := sandboxOwner(p); ok {
		t.Fatal("a Pod without a controller is not a Sandbox's")
	}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Sandbox", Name: "x", UID: "u", Controller: &tr}}
	if _, ok := sandboxOwner(p); ok {
		t.Fatal("a Kind named Sandbox in another group is not a Sandbox")
	}
	p.OwnerReferences[0].APIVersion = "agents.x-k8s.io/v1beta1"
	if uid, ok := sandboxOwner(p); !ok || uid != "u" {
		t.Fatalf("sandboxOwner = %q, %v", uid, ok)
	}
	p.Annotations[AnnotationCheckpointResult] = "{}"
	if wants(p) {
		t.Fatal("an answered request must not be redone")
	}
}

// Snapshots of deleted (or recreated) Sandboxes are removed, those of live
// ones kept, and a failed lookup never deletes anything.
func TestCollectRemovesSnapshotsOfGoneSandboxes(t *testing.T) {
	s := Store{Root: t.TempDir()}
	put := func(ns, id, name, uid string) {
		dir, _ := s.SnapshotDir(ns, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		b := []byte(`{"namespace":"` + ns + `","sandboxName":"` + name + `","sandboxUID":"` + uid + `","files":{"pages.img":1}}`)
		if err := os.WriteFile(filepath.Join(dir, metaFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put("team-a", "uid-live", "live", "uid-live")
	put("team-a", "uid-gone", "gone", "uid-gone")
	put("team-a", "uid-old", "recreated", "uid-old")
	put("team-b", "uid-err", "flaky", "uid-err")
	stale, _ := s.SnapshotDir("team-a", "uid-stale")
	fresh, _ := s.SnapshotDir("team-a", "uid-writing")
	for _, d := range []string{stale + ".partial", fresh + ".partial"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale+".partial", old, old); err != nil {
		t.Fatal(err)
	}
	oldRestore, _ := s.RestoreDir("pod-old")
	newRestore, _ := s.RestoreDir("pod-new")
	for _, d := range []string{oldRestore, newRestore} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(oldRestore, old, old); err != nil {
		t.Fatal(err)
	}
	lookup := func(_ context.Context, ns, name string) (string, error) {
		switch name {
		case "live":
			return "uid-live", nil
		case "recreated":
			return "uid-new", nil
		case "flaky":
			return "", os.ErrDeadlineExceeded
		}
		return "", nil
	}
	deleted, err := s.Collect(context.Background(), lookup, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"team-a/uid-gone": true, "team-a/uid-old": true, "team-a/uid-stale.partial": true, "restoring/pod-old": true}
	if len(deleted) != len(want) {
		t.Fatalf("deleted %v, want %v", deleted, want)
	}
	for _, d := range deleted {
		if !want[d] {
			t.Errorf("deleted %s", d)
		}
	}
	for _, keep := range [][2]string{{"team-a", "uid-live"}, {"team-b", "uid-err"}} {
		if _, err := s.ReadMeta(keep[0], keep[1]); err != nil {
			t.Errorf("%s/%s was deleted: %v", keep[0], keep[1], err)
		}
	}
	if _, err := os.Stat(newRestore); err != nil {
		t.Errorf("a restore in progress was removed: %v", err)
	}
	if _, err := os.Stat(fresh + ".partial"); err != nil {
		t.Errorf("a checkpoint being written was removed: %v", err)
	}
}

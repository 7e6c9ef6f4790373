package hibernate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeCheckpointNode is a containerd task dir holding one pod sandbox and a runsc
// stand-in script (the real runsc runs in test/e2e).
func fakeCheckpointNode(t *testing.T, podUID, script string) Checkpointer {
	t.Helper()
	dir := t.TempDir()
	task := filepath.Join(dir, "tasks", "sb1")
	if err := os.MkdirAll(task, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := `{"annotations":{"` + annoContainerType + `":"sandbox","` + annoSandboxUID + `":"` + podUID + `"}}`
	if err := os.WriteFile(filepath.Join(task, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	runsc := filepath.Join(dir, "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\necho \"$@\" > "+filepath.Join(dir, "args")+"\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Checkpointer{Store: Store{Root: filepath.Join(dir, "store")}, Runsc: runsc, RunscRoot: dir, TaskDir: filepath.Join(dir, "tasks")}
}

const writeImage = `for a in "$@"; do case "$a" in --image-path=*) echo state > "${a#--image-path=}/checkpoint.img";; esac; done
`

func TestCheckpointMarksThePod(t *testing.T) {
	c := fakeCheckpointNode(t, "pod-1", writeImage)
	marks := filepath.Join(c.Store.Root, CheckpointedDir)
	if err := os.MkdirAll(marks, 0o700); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(marks, "pod-old")
	if err := os.WriteFile(old, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-CheckpointedTTL - time.Minute)
	if err := os.Chtimes(old, long, long); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-1", Namespace: "ns", SandboxName: "sb", SandboxUID: "u1", SnapshotID: "snap1"}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(marks, "pod-1")); err != nil {
		t.Fatalf("the checkpointed Pod is not marked: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("an expired marker was kept: %v", err)
	}
	args, _ := os.ReadFile(filepath.Join(filepath.Dir(c.Runsc), "args"))
	if !strings.Contains(string(args), "checkpoint --exclude-committed-zero-pages --image-path=") {
		t.Fatalf("runsc ran with %q", args)
	}
}

// A failed checkpoint leaves no marker: the Pod may be started again.
func TestFailedCheckpointUnmarksThePod(t *testing.T) {
	c := fakeCheckpointNode(t, "pod-2", "echo 'checkpoint failed: boom' >&2\nexit 128\n")
	if _, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-2", Namespace: "ns", SandboxName: "sb", SandboxUID: "u1", SnapshotID: "snap2"}); err == nil {
		t.Fatal("Checkpoint succeeded with a failing runsc")
	}
	if _, err := os.Stat(filepath.Join(c.Store.Root, CheckpointedDir, "pod-2")); !os.IsNotExist(err) {
		t.Fatalf("a failed checkpoint left the Pod marked: %v", err)
	}
}

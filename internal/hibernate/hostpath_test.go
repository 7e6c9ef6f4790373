package hibernate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseHostMount(t *testing.T) {
	for in, want := range map[string]HostMount{
		"/var/lib/kubelet/pods":                        {Host: "/var/lib/kubelet/pods", Local: "/var/lib/kubelet/pods"},
		"/var/lib/kubelet/pods:/host/kubelet-pods":     {Host: "/var/lib/kubelet/pods", Local: "/host/kubelet-pods"},
		"/opt/local-path-provisioner:/host/local-path": {Host: "/opt/local-path-provisioner", Local: "/host/local-path"},
	} {
		if got, err := ParseHostMount(in); err != nil || got != want {
			t.Errorf("ParseHostMount(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "relative", "/a:relative", "/a:", ":/b", "/a/../b", "/a/", "/a:/b:/c", "/a:/b/../c"} {
		if m, err := ParseHostMount(bad); err == nil {
			t.Errorf("ParseHostMount(%q) = %+v, want an error", bad, m)
		}
	}
}

// A node path becomes the agent's path under the mount that contains it
// (the longest one), by whole components; a path outside every mount, or
// not clean, is refused.
func TestHostPathsLocal(t *testing.T) {
	h := HostPaths{
		{Host: "/var/lib/kubelet/pods", Local: "/host/kubelet-pods"},
		{Host: "/var/lib", Local: "/host/var-lib"},
		{Host: "/opt/local-path", Local: "/opt/local-path"},
	}
	for _, tc := range []struct{ in, want string }{
		{"/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount", "/host/kubelet-pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"},
		{"/var/lib/kubelet/pods", "/host/kubelet-pods"},
		// Longest mount wins; a sibling with the same prefix is not inside.
		{"/var/lib/kubelet/pods2/x", "/host/var-lib/kubelet/pods2/x"},
		{"/var/lib/other", "/host/var-lib/other"},
		{"/opt/local-path/pvc-1_ns_data", "/opt/local-path/pvc-1_ns_data"},
	} {
		if got, err := h.Local(tc.in); err != nil || got != tc.want {
			t.Errorf("Local(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"/opt/local-path-2/x", "/opt", "/var", "/", "/etc/passwd", "/host/kubelet-pods/uid-1"} {
		if got, err := h.Local(bad); !errors.Is(err, ErrNotMounted) {
			t.Errorf("Local(%q) = %q, %v; want ErrNotMounted", bad, got, err)
		}
	}
	for _, bad := range []string{"relative/path", "/var/lib/kubelet/pods/../../../etc", "/var/lib/kubelet/pods/x/", ""} {
		if got, err := h.Local(bad); err == nil {
			t.Errorf("Local(%q) = %q, want an error", bad, got)
		}
	}
	// A host process: every (clean) node path is its own.
	if got, err := HostPaths(nil).Local("/var/lib/kubelet/pods/x"); err != nil || got != "/var/lib/kubelet/pods/x" {
		t.Errorf("without mounts: %q, %v", got, err)
	}
}

// A link inside the mount that points out of it resolves, in the agent's
// container, against the container's own root: refused, not followed.
func TestHostPathsReachRefusesLinksOutOfTheMount(t *testing.T) {
	mnt, outside := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(mnt, "pod-a", "vol"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(mnt, "pod-b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(mnt, "pod-a"), filepath.Join(mnt, "pod-c")); err != nil {
		t.Fatal(err)
	}
	h := HostPaths{{Host: "/node/pods", Local: mnt}}
	if got, err := h.Reach("/node/pods/pod-a/vol"); err != nil || got != filepath.Join(mnt, "pod-a", "vol") {
		t.Errorf("Reach(pod-a/vol) = %q, %v", got, err)
	}
	if got, err := h.Reach("/node/pods/pod-b"); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Reach through a link out of the mount = %q, %v; want ErrNotMounted", got, err)
	}
	// A link that stays inside is resolved to the real directory.
	if got, err := h.Reach("/node/pods/pod-c/vol"); err != nil || got != filepath.Join(mnt, "pod-a", "vol") {
		t.Errorf("Reach(pod-c/vol) = %q, %v", got, err)
	}
	if _, err := h.Reach("/node/pods/missing"); err == nil {
		t.Error("Reach of a missing path succeeded")
	}
}

// The agent in a container: containerd reports the volume at its node path
// (the kubelet's pods/ dir, which does not exist in the agent's own file
// system); the snapshot is written through the mount, and the reference
// the shim resolves on the node keeps the node's path.
func TestCheckpointOntoVolumeThroughAMount(t *testing.T) {
	mnt := t.TempDir()
	const nodePods = "/nonexistent-node/var/lib/kubelet/pods"
	rel := filepath.Join("pod-uid-1", "volumes", "kubernetes.io~csi", "pv-1", "mount")
	if err := os.MkdirAll(filepath.Join(mnt, rel), 0o755); err != nil {
		t.Fatal(err)
	}
	c := fakeNode(t, "pod-uid-1", filepath.Join(nodePods, rel))
	c.HostPaths = HostPaths{{Host: nodePods, Local: mnt}}
	v, err := c.FindVolume(claimPod("pod-uid-1"), "pause1")
	if err != nil || v == nil {
		t.Fatalf("FindVolume = %+v, %v", v, err)
	}
	if v.HostPath != filepath.Join(nodePods, rel) || v.Path != filepath.Join(mnt, rel) ||
		v.Ref != filepath.Join(nodePods, PodUIDPlaceholder, "volumes", "kubernetes.io~csi", "pv-1", "mount") {
		t.Fatalf("volume = %+v", v)
	}
	m, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-uid-1", Namespace: "ns", SandboxUID: "sb-uid", SnapshotID: "sb-uid", Volume: v})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(mnt, rel, VolumeSnapshotDir, "sb-uid", metaFile))
	if err != nil || MetaDigest(b) != m.Digest {
		t.Fatalf("meta.json through the mount: %v (digest %s)", err, m.Digest)
	}
}

// A volume whose node path is outside the mounts is not looked for in the
// agent's own file system, even where that has a directory by that name
// (it is the container's, not the node's): the snapshot stays in the node
// store.
func TestVolumeOutsideTheMountsIsNotTheContainersOwnDirectory(t *testing.T) {
	decoy := filepath.Join(t.TempDir(), "pvc-1")
	if err := os.MkdirAll(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	c := fakeNode(t, "pod-uid-1", decoy)
	c.HostPaths = HostPaths{{Host: "/var/lib/kubelet/pods", Local: t.TempDir()}}
	if v, err := c.FindVolume(claimPod("pod-uid-1"), "pause1"); !errors.Is(err, ErrNotMounted) || !strings.Contains(err.Error(), `"data"`) {
		t.Fatalf("FindVolume = %+v, %v; want ErrNotMounted naming the volume", v, err)
	}
	a := &Agent{Checkpointer: c}
	v, err := a.volumeOf(claimPod("pod-uid-1"))
	if err != nil || v != nil {
		t.Fatalf("volumeOf = %+v, %v; want the node store", v, err)
	}
	if _, err := c.Checkpoint(context.Background(), Request{PodUID: "pod-uid-1", Namespace: "ns", SandboxUID: "sb-uid", SnapshotID: "sb-uid", Volume: v}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(decoy); len(entries) != 0 {
		t.Fatalf("the agent wrote into its own directory: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(c.Store.Root, "snapshots", "ns", "sb-uid", metaFile)); err != nil {
		t.Fatalf("the snapshot is not in the node store: %v", err)
	}
}

package restore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// volSnapshot writes a snapshot the way the node agent publishes it on a
// volume and returns the restore reference the controller would set.
func volSnapshot(t *testing.T, vol, ns, id string, files map[string]string) Ref {
	t.Helper()
	dir := filepath.Join(vol, volumeSnapshotDir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m := Meta{Namespace: ns, SandboxUID: id, SnapshotID: id, RuntimeHash: "h1", Files: map[string]int64{}, SHA256: map[string]string{}}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256([]byte(content))
		m.Files[name], m.SHA256[name] = int64(len(content)), hex.EncodeToString(s[:])
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, metaFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return Ref{ID: id, Digest: "sha256:" + hex.EncodeToString(s[:]), VolumePath: vol}
}

func encodeRef(r Ref) string { return r.ID + ";digest=" + r.Digest + ";volume=" + r.VolumePath }

func TestParseRef(t *testing.T) {
	if r, err := ParseRef("uid-1"); err != nil || r != (Ref{ID: "uid-1"}) {
		t.Fatalf("node ref: %+v %v", r, err)
	}
	want := Ref{ID: "uid-1", Digest: "sha256:ab", VolumePath: "/v/a;b"}
	if r, err := ParseRef(encodeRef(want)); err != nil || r != want {
		t.Fatalf("volume ref: %+v %v", r, err)
	}
	for _, bad := range []string{"uid;volume=/v", "uid;digest=md5:1;volume=/v", "uid;digest=sha256:1", "uid;digest=sha256:1;volume="} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) accepted", bad)
		}
	}
}

// A genuine volume snapshot is moved off the volume and restored from the
// node's restore dir; the Pod's app container follows.
func TestDecideVolumeSnapshot(t *testing.T) {
	s := Store{Root: t.TempDir()}
	vol := t.TempDir()
	ref := volSnapshot(t, vol, "team-a", "sb1", map[string]string{"checkpoint.img": "state", "pages.img": "pages"})
	d, err := s.Decide(anns("sandbox", "team-a", "pod1", encodeRef(ref)), "h1")
	want, _ := s.RestoreDir("pod1")
	if err != nil || !d.Restore || d.ImagePath != want {
		r, _ := s.ReadResult("pod1")
		t.Fatalf("pause: %+v %v (result %+v)", d, err, r)
	}
	if _, err := os.Stat(filepath.Join(vol, volumeSnapshotDir, "sb1")); !os.IsNotExist(err) {
		t.Fatalf("snapshot still on the volume: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(want, "pages.img")); err != nil || string(b) != "pages" {
		t.Fatalf("restore dir: %q %v", b, err)
	}
	if d, _ := s.Decide(anns("container", "team-a", "pod1", encodeRef(ref)), "h1"); !d.Restore || d.ImagePath != want {
		t.Fatalf("app container: %+v", d)
	}
}

// Tenant-written changes to a volume snapshot are refused, and the refused
// snapshot is gone from both the volume and the node.
func TestDecideVolumeSnapshotRefusesTampering(t *testing.T) {
	files := map[string]string{"checkpoint.img": "state", "pages.img": "pages"}
	for name, tc := range map[string]struct {
		tamper func(t *testing.T, vol string, ref *Ref)
		want   string
	}{
		"modified file, same size": {func(t *testing.T, vol string, _ *Ref) {
			write(t, filepath.Join(vol, volumeSnapshotDir, "sb1", "pages.img"), "PAGES")
		}, "does not match its recorded SHA-256"},
		"meta rewritten to match the modified file": {func(t *testing.T, vol string, _ *Ref) {
			// The tenant recomputes meta.json; its digest is no longer the one
			// the controller holds.
			volSnapshot(t, vol, "team-a", "sb1", map[string]string{"checkpoint.img": "evil!", "pages.img": "pages"})
		}, "does not match the digest"},
		"another Sandbox's snapshot copied in": {func(t *testing.T, vol string, ref *Ref) {
			other := t.TempDir()
			volSnapshot(t, other, "team-a", "sb1", map[string]string{"checkpoint.img": "other", "pages.img": "other"})
			os.RemoveAll(filepath.Join(vol, volumeSnapshotDir, "sb1"))
			if err := os.Rename(filepath.Join(other, volumeSnapshotDir, "sb1"), filepath.Join(vol, volumeSnapshotDir, "sb1")); err != nil {
				t.Fatal(err)
			}
		}, "does not match the digest"},
		"planted extra file": {func(t *testing.T, vol string, _ *Ref) {
			write(t, filepath.Join(vol, volumeSnapshotDir, "sb1", "pages_meta.img"), "x")
		}, "did not write"},
		"file replaced by a symlink": {func(t *testing.T, vol string, _ *Ref) {
			p := filepath.Join(vol, volumeSnapshotDir, "sb1", "pages.img")
			os.Remove(p)
			if err := os.Symlink("/etc/hostname", p); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		"snapshot dir replaced by a symlink": {func(t *testing.T, vol string, _ *Ref) {
			p := filepath.Join(vol, volumeSnapshotDir, "sb1")
			os.RemoveAll(p)
			if err := os.Symlink(t.TempDir(), p); err != nil {
				t.Fatal(err)
			}
		}, "not a directory"},
		"deleted": {func(t *testing.T, vol string, _ *Ref) {
			os.RemoveAll(filepath.Join(vol, volumeSnapshotDir, "sb1"))
		}, "missing"},
	} {
		t.Run(name, func(t *testing.T) {
			s := Store{Root: t.TempDir()}
			vol := t.TempDir()
			ref := volSnapshot(t, vol, "team-a", "sb1", files)
			tc.tamper(t, vol, &ref)
			d, err := s.Decide(anns("sandbox", "team-a", "pod1", encodeRef(ref)), "h1")
			if err != nil || d.Restore {
				t.Fatalf("restored a tampered snapshot: %+v %v", d, err)
			}
			r, _ := s.ReadResult("pod1")
			if r.State != StateFallback || r.Snapshot != "sb1" || !strings.Contains(r.Reason, tc.want) {
				t.Fatalf("result %+v, want Fallback saying %q", r, tc.want)
			}
			if d, _ := s.Decide(anns("container", "team-a", "pod1", encodeRef(ref)), "h1"); d.Restore {
				t.Fatal("app container restored after the pod fell back")
			}
			dir, _ := s.RestoreDir("pod1")
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("refused snapshot left in the restore dir: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(vol, volumeSnapshotDir, "sb1")); !os.IsNotExist(err) {
				t.Errorf("refused snapshot left on the volume: %v", err)
			}
		})
	}
}

// A reference to another namespace's snapshot (same files, same digest)
// is refused: meta.json names the namespace it was taken in.
func TestDecideVolumeSnapshotOtherNamespace(t *testing.T) {
	s := Store{Root: t.TempDir()}
	vol := t.TempDir()
	ref := volSnapshot(t, vol, "team-b", "sb1", map[string]string{"pages.img": "pages"})
	if d, _ := s.Decide(anns("sandbox", "team-a", "pod1", encodeRef(ref)), "h1"); d.Restore {
		t.Fatal("restored another namespace's snapshot")
	}
	if r, _ := s.ReadResult("pod1"); !strings.Contains(r.Reason, "was recorded as team-b/sb1") {
		t.Fatalf("result %+v", r)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A volume on another filesystem than the node store (here tmpfs vs the
// test's temp dir) is copied off instead of renamed, with the same checks.
func TestDecideVolumeSnapshotOtherFilesystem(t *testing.T) {
	vol, err := os.MkdirTemp("/dev/shm", "hib-vol-")
	if err != nil {
		t.Fatalf("a tmpfs directory for the volume: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(vol) })
	s := Store{Root: t.TempDir()}
	ref := volSnapshot(t, vol, "team-a", "sb1", map[string]string{"checkpoint.img": "state", "pages.img": "pages"})
	d, err := s.Decide(anns("sandbox", "team-a", "pod1", encodeRef(ref)), "h1")
	if err != nil || !d.Restore {
		r, _ := s.ReadResult("pod1")
		t.Fatalf("pause: %+v %v (result %+v)", d, err, r)
	}
	if b, err := os.ReadFile(filepath.Join(d.ImagePath, "pages.img")); err != nil || string(b) != "pages" {
		t.Fatalf("copied pages: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(vol, volumeSnapshotDir, "sb1")); !os.IsNotExist(err) {
		t.Fatalf("snapshot still on the volume: %v", err)
	}
	// Tampered on the other filesystem: refused the same way.
	ref = volSnapshot(t, vol, "team-a", "sb2", map[string]string{"pages.img": "pages"})
	write(t, filepath.Join(vol, volumeSnapshotDir, "sb2", "pages.img"), "PAGES")
	if d, _ := s.Decide(anns("sandbox", "team-a", "pod2", encodeRef(ref)), "h1"); d.Restore {
		t.Fatal("restored a tampered snapshot copied from another filesystem")
	}
}

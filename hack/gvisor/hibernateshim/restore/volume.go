package restore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A snapshot on the Sandbox's volume (internal/hibernate/volume.go, keep in
// step) sits in tenant-writable storage, so nothing in it is trusted: the
// restore reference on the Pod (set only by the controller, from status
// only the controller writes) carries the SHA-256 of the meta.json the node
// agent wrote, and meta.json lists the SHA-256 of every image file. The
// shim first moves the snapshot off the volume into RestoreDir (root-only,
// so nobody can change it between the check and runsc's reads), then
// checks it; anything modified, swapped in from another Sandbox or planted
// is refused and the Pod starts clean with the volume's files.
const (
	volumeSnapshotDir = ".agent-sandbox-snapshots"
	podUIDPlaceholder = "{pod-uid}"
)

// Ref is the parsed AnnotationSnapshot value:
// "<id>" (node store) or "<id>;digest=sha256:<hex>;volume=<host path>".
type Ref struct {
	ID, Digest, VolumePath string
}

// ParseRef parses the annotation value.
func ParseRef(v string) (Ref, error) {
	id, rest, found := strings.Cut(v, ";")
	if !found {
		return Ref{ID: id}, nil
	}
	digest, vol, okVol := strings.Cut(rest, ";volume=")
	d, okDigest := strings.CutPrefix(digest, "digest=")
	if !okVol || !okDigest || vol == "" || !strings.HasPrefix(d, "sha256:") {
		return Ref{}, fmt.Errorf("invalid restore reference %q", v)
	}
	return Ref{ID: id, Digest: d, VolumePath: vol}, nil
}

// RestoreDir is where a Pod's volume snapshot is checked and restored from.
func (s Store) RestoreDir(podUID string) (string, error) {
	if !safeComponent.MatchString(podUID) {
		return "", fmt.Errorf("invalid pod UID %q", podUID)
	}
	return filepath.Join(s.Root, "restoring", podUID), nil
}

// volumePath resolves the reference's host path for this Pod.
func volumePath(ref Ref, podUID string) (string, error) {
	p := strings.ReplaceAll(ref.VolumePath, podUIDPlaceholder, podUID)
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", fmt.Errorf("volume path %q is not a clean absolute path", p)
	}
	return p, nil
}

// PrepareVolume moves the snapshot ref names off the Pod's volume and
// verifies it; it returns the image path for runsc restore. On error the
// snapshot is removed from both places (it can never be restored).
func (s Store) PrepareVolume(namespace, podUID string, ref Ref, runtimeHash string) (string, error) {
	if !safeComponent.MatchString(namespace) || !safeComponent.MatchString(ref.ID) {
		return "", fmt.Errorf("invalid snapshot reference %q/%q", namespace, ref.ID)
	}
	private, err := s.RestoreDir(podUID)
	if err != nil {
		return "", err
	}
	vol, err := volumePath(ref, podUID)
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(private); err != nil {
		return "", fmt.Errorf("clearing restore dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(private), 0o700); err != nil {
		return "", fmt.Errorf("creating restore dir: %w", err)
	}
	root, err := os.OpenRoot(vol)
	if err != nil {
		return "", fmt.Errorf("snapshot %s/%s: opening the volume: %w", namespace, ref.ID, err)
	}
	defer root.Close()
	onVolume := filepath.Join(volumeSnapshotDir, ref.ID)
	err = moveOff(root, onVolume, ref.ID, private)
	// Whatever was on the volume is now here or useless: never leave it.
	_ = root.RemoveAll(onVolume)
	if err == nil {
		err = Verify(private, namespace, ref.ID, ref.Digest, runtimeHash)
	}
	if err != nil {
		_ = os.RemoveAll(private)
		return "", err
	}
	return private, nil
}

// moveOff renames <root>/<rel> (which must be a real directory, not a
// symlink) to private, relative to a directory descriptor inside the
// root; a volume on another filesystem is copied file by file.
func moveOff(root *os.Root, rel, id, private string) error {
	fi, err := root.Lstat(rel)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("snapshot %s is missing from the volume", id)
	}
	if err != nil {
		return fmt.Errorf("snapshot %s on the volume: %w", id, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("snapshot %s on the volume is not a directory (modified?)", id)
	}
	dir, err := root.Open(volumeSnapshotDir)
	if err != nil {
		return fmt.Errorf("opening %s on the volume: %w", volumeSnapshotDir, err)
	}
	defer dir.Close()
	err = unix.Renameat(int(dir.Fd()), id, unix.AT_FDCWD, private)
	if err == nil || !errors.Is(err, unix.EXDEV) {
		if err != nil {
			return fmt.Errorf("moving snapshot %s off the volume: %w", id, err)
		}
		return nil
	}
	if err := os.Mkdir(private, 0o700); err != nil {
		return fmt.Errorf("creating restore dir: %w", err)
	}
	entries, err := listDir(root, rel)
	if err != nil {
		return err
	}
	for _, n := range entries {
		if !safeFile.MatchString(n) {
			return fmt.Errorf("snapshot %s on the volume holds an invalid file %q", id, n)
		}
		if err := copyFile(root, filepath.Join(rel, n), filepath.Join(private, n)); err != nil {
			return fmt.Errorf("copying snapshot %s off the volume: %w", id, err)
		}
	}
	return nil
}

func listDir(root *os.Root, rel string) ([]string, error) {
	d, err := root.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("opening snapshot on the volume: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing snapshot on the volume: %w", err)
	}
	return names, nil
}

func copyFile(root *os.Root, rel, dst string) error {
	if fi, err := root.Lstat(rel); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", rel)
	}
	in, err := root.Open(rel)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Verify checks a snapshot directory (root-only) against the digest the
// controller kept: meta.json must hash to digest and name this namespace
// and snapshot, and every file must be listed in it with its size and
// SHA-256 (no extra file, no symlink).
func Verify(dir, namespace, id, digest, runtimeHash string) error {
	mb, err := readRegular(filepath.Join(dir, metaFile))
	if err != nil {
		return fmt.Errorf("snapshot %s/%s is missing or incomplete: %w", namespace, id, err)
	}
	sum := sha256.Sum256(mb)
	if "sha256:"+hex.EncodeToString(sum[:]) != digest {
		return fmt.Errorf("snapshot %s/%s does not match the digest the node agent recorded (modified or not this Sandbox's)", namespace, id)
	}
	var m Meta
	if err := json.Unmarshal(mb, &m); err != nil {
		return fmt.Errorf("snapshot %s/%s metadata is corrupt: %w", namespace, id, err)
	}
	if m.Namespace != namespace || m.SnapshotID != id {
		return fmt.Errorf("snapshot %s/%s was recorded as %s/%s", namespace, id, m.Namespace, m.SnapshotID)
	}
	if runtimeHash != "" && m.RuntimeHash != runtimeHash {
		return fmt.Errorf("snapshot %s/%s was taken by another runtime version", namespace, id)
	}
	if len(m.Files) == 0 || len(m.SHA256) != len(m.Files) {
		return fmt.Errorf("snapshot %s/%s lists no verifiable image files", namespace, id)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing snapshot: %w", err)
	}
	for _, e := range entries {
		if e.Name() == metaFile {
			continue
		}
		if _, ok := m.Files[e.Name()]; !ok {
			return fmt.Errorf("snapshot %s/%s holds a file %q the node agent did not write", namespace, id, e.Name())
		}
	}
	for name, size := range m.Files {
		if !safeFile.MatchString(name) || strings.Contains(name, "..") {
			return fmt.Errorf("snapshot %s/%s lists an invalid file %q", namespace, id, name)
		}
		got, n, err := hashRegular(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("snapshot %s/%s: %w", namespace, id, err)
		}
		if n != size {
			return fmt.Errorf("snapshot %s/%s: %s is %d bytes, expected %d (truncated?)", namespace, id, name, n, size)
		}
		if got != m.SHA256[name] {
			return fmt.Errorf("snapshot %s/%s: %s does not match its recorded SHA-256 (modified)", namespace, id, name)
		}
	}
	return nil
}

func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is not a regular file (a symlink)", filepath.Base(path))
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	return f, nil
}

func readRegular(path string) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

func hashRegular(path string) (string, int64, error) {
	f, err := openRegular(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", filepath.Base(path), err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

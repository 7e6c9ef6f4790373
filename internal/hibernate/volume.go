package hibernate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// A Sandbox with a PersistentVolumeClaim keeps its snapshot on that volume,
// in VolumeSnapshotDir, so the snapshot lives and dies with the claim and
// the resumed Pod goes wherever the volume can be mounted (no node pin of
// its own). The volume is tenant-writable, so the snapshot there is
// tenant-writable data: the agent records a SHA-256 of every image file in
// meta.json, the digest of meta.json goes (through the checkpoint result
// the admission policy lets only the agent write) into the Sandbox's status
// (only the controller writes status) and from there into the restore
// reference on the new Pod (only the controller may set it); the shim moves
// the snapshot off the volume and checks it against that digest before it
// restores anything.
const (
	// VolumeSnapshotDir is the hidden directory at the volume's root.
	VolumeSnapshotDir = ".agent-sandbox-snapshots"
	// PodUIDPlaceholder stands for the restoring Pod's UID in a volume path
	// under the kubelet's per-Pod directory (CSI, local volumes), which
	// changes with every Pod.
	PodUIDPlaceholder = "{pod-uid}"
)

// CRI annotations on a container's OCI spec (containerd).
const (
	annoSandboxID     = "io.kubernetes.cri.sandbox-id"
	annoContainerName = "io.kubernetes.cri.container-name"
)

// Volume is where a snapshot goes on the Pod's volume.
type Volume struct {
	// Name is the Pod volume's name (the volumeClaimTemplate's name).
	Name string
	// HostPath is the volume's root as this node sees it.
	HostPath string
	// Path is where the agent reaches HostPath: the same for a host
	// process, under a mount for an agent in a container (HostPaths).
	// Empty means HostPath.
	Path string
	// Ref is HostPath with the Pod's UID replaced by PodUIDPlaceholder:
	// what a later Pod's shim resolves.
	Ref string
}

// FindVolume returns the first PersistentVolumeClaim volume of the Pod that
// a container mounts whole (no subPath), located through that container's
// OCI spec, which containerd wrote from the kubelet's request: the host
// path comes from the node's mount table for the Pod, identified by the
// Pod sandbox's ID, never from anything the tenant wrote. nil, nil: the Pod
// has no such volume (the snapshot stays in the node store).
func (c Checkpointer) FindVolume(pod *corev1.Pod, sandboxID string) (*Volume, error) {
	claims := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = true
		}
	}
	if len(claims) == 0 {
		return nil, nil
	}
	for _, v := range pod.Spec.Volumes {
		if !claims[v.Name] {
			continue
		}
		for _, ctr := range pod.Spec.Containers {
			for _, m := range ctr.VolumeMounts {
				if m.Name != v.Name || m.SubPath != "" || m.SubPathExpr != "" {
					continue
				}
				src, err := c.mountSource(sandboxID, ctr.Name, m.MountPath)
				if err != nil {
					return nil, fmt.Errorf("locating volume %q: %w", v.Name, err)
				}
				local, err := c.HostPaths.Reach(src)
				if err != nil {
					return nil, fmt.Errorf("volume %q: %w", v.Name, err)
				}
				fi, err := os.Lstat(local)
				if err != nil {
					return nil, fmt.Errorf("volume %q: host path %s: %w", v.Name, src, err)
				}
				if !fi.IsDir() {
					return nil, fmt.Errorf("volume %q: host path %s is not a directory", v.Name, src)
				}
				ref := src
				if uid := string(pod.UID); uid != "" && strings.Contains(src, "/"+uid+"/") {
					ref = strings.Replace(src, "/"+uid+"/", "/"+PodUIDPlaceholder+"/", 1)
				}
				return &Volume{Name: v.Name, HostPath: src, Path: local, Ref: ref}, nil
			}
		}
	}
	return nil, nil
}

// path is where the agent writes onto the volume.
func (v *Volume) path() string {
	if v.Path != "" {
		return v.Path
	}
	return v.HostPath
}

// mountSource reads the host source of dest in the OCI spec of the
// container named name of the Pod sandbox sandboxID.
func (c Checkpointer) mountSource(sandboxID, name, dest string) (string, error) {
	entries, err := os.ReadDir(c.TaskDir)
	if err != nil {
		return "", fmt.Errorf("listing containerd tasks: %w", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.TaskDir, e.Name(), "config.json"))
		if err != nil {
			continue
		}
		var spec struct {
			Annotations map[string]string `json:"annotations"`
			Mounts      []struct {
				Destination string `json:"destination"`
				Source      string `json:"source"`
			} `json:"mounts"`
		}
		if json.Unmarshal(b, &spec) != nil {
			continue
		}
		a := spec.Annotations
		if a[annoContainerType] != "container" || a[annoSandboxID] != sandboxID || a[annoContainerName] != name {
			continue
		}
		for _, m := range spec.Mounts {
			if filepath.Clean(m.Destination) == filepath.Clean(dest) {
				if !filepath.IsAbs(m.Source) || filepath.Clean(m.Source) != m.Source {
					return "", fmt.Errorf("mount source %q is not a clean absolute path", m.Source)
				}
				return m.Source, nil
			}
		}
		return "", fmt.Errorf("container %q has no mount at %s", name, dest)
	}
	return "", fmt.Errorf("no running container %q in pod sandbox %s: %w", name, sandboxID, os.ErrNotExist)
}

// hashFiles returns the hex SHA-256 of each regular file in dir.
func hashFiles(dir string) (map[string]string, map[string]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("listing snapshot: %w", err)
	}
	sums, sizes := map[string]string{}, map[string]int64{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, nil, fmt.Errorf("snapshot entry %s is not a regular file", e.Name())
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, fmt.Errorf("opening snapshot file: %w", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("hashing snapshot file %s: %w", e.Name(), err)
		}
		sums[e.Name()], sizes[e.Name()] = hex.EncodeToString(h.Sum(nil)), n
	}
	return sums, sizes, nil
}

// MetaDigest is what the controller keeps and the shim checks: the SHA-256
// of meta.json's bytes, which list every file's SHA-256.
func MetaDigest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// publishToVolume moves a complete snapshot directory (on the node) to
// <volume>/VolumeSnapshotDir/<id>. Every path below the volume's root is
// resolved inside an os.Root, and the final move is a renameat(2) relative
// to a directory descriptor, so a symlink the tenant planted in its volume
// can never make the agent (root) write outside it. A volume on another
// filesystem gets a copy (created exclusively, then renamed in place).
func publishToVolume(src, volume, id string) error {
	root, err := os.OpenRoot(volume)
	if err != nil {
		return fmt.Errorf("opening volume %s: %w", volume, err)
	}
	defer root.Close()
	if err := root.Mkdir(VolumeSnapshotDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s on the volume: %w", VolumeSnapshotDir, err)
	}
	fi, err := root.Lstat(VolumeSnapshotDir)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("%s on the volume is not a directory", VolumeSnapshotDir)
	}
	target := filepath.Join(VolumeSnapshotDir, id)
	for _, old := range []string{target, target + ".partial"} {
		if err := root.RemoveAll(old); err != nil {
			return fmt.Errorf("removing old snapshot from the volume: %w", err)
		}
	}
	dir, err := root.Open(VolumeSnapshotDir)
	if err != nil {
		return fmt.Errorf("opening %s on the volume: %w", VolumeSnapshotDir, err)
	}
	defer dir.Close()
	err = unix.Renameat(unix.AT_FDCWD, src, int(dir.Fd()), id)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("moving the snapshot onto the volume: %w", err)
	}
	if err := copyIntoRoot(root, src, target+".partial"); err != nil {
		_ = root.RemoveAll(target + ".partial")
		return err
	}
	if err := root.Rename(target+".partial", target); err != nil {
		_ = root.RemoveAll(target + ".partial")
		return fmt.Errorf("publishing the snapshot on the volume: %w", err)
	}
	return os.RemoveAll(src)
}

func copyIntoRoot(root *os.Root, src, dst string) error {
	if err := root.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("creating %s on the volume: %w", dst, err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("listing snapshot: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		in, err := os.Open(filepath.Join(src, n))
		if err != nil {
			return fmt.Errorf("opening snapshot file: %w", err)
		}
		out, err := root.OpenFile(filepath.Join(dst, n), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			in.Close()
			return fmt.Errorf("creating snapshot file on the volume: %w", err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err == nil {
			err = out.Sync()
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("copying %s onto the volume: %w", n, err)
		}
	}
	return nil
}

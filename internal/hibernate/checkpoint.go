package hibernate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// CRI annotations containerd writes into every OCI spec.
const (
	annoContainerType = "io.kubernetes.cri.container-type"
	annoSandboxUID    = "io.kubernetes.cri.sandbox-uid"
)

// Checkpointer drives runsc on the node. The Pod is identified by its UID
// (from the apiserver), matched against the UID containerd wrote into the
// sandbox's OCI spec: never by a name a tenant could reuse.
type Checkpointer struct {
	Store Store
	// Runsc is the runsc binary the node's shim uses (same version, or the
	// restore is refused as incompatible).
	Runsc string
	// RunscRoot is the shim's runsc state root for the CRI namespace, e.g.
	// /run/agent-sandbox/runsc/k8s.io.
	RunscRoot string
	// TaskDir holds containerd's task bundles for the CRI namespace, e.g.
	// /run/agent-sandbox/containerd/io.containerd.runtime.v2.task/k8s.io.
	TaskDir string
	// HostPaths are the node directories holding Pod volumes that are
	// mounted into an agent running in a container; empty for a host
	// process.
	HostPaths HostPaths
}

// Request says what to checkpoint and whose snapshot it is.
type Request struct {
	PodUID      string
	Namespace   string
	SandboxName string
	SandboxUID  string
	SnapshotID  string
	// Volume, when set, is where the snapshot is published (the Pod's
	// PersistentVolumeClaim); nil keeps it in the node store.
	Volume *Volume
}

// FindPodSandbox returns the container ID of the Pod's gVisor sandbox (its
// pause container, whose ID is the runsc sandbox ID).
func (c Checkpointer) FindPodSandbox(podUID string) (string, error) {
	entries, err := os.ReadDir(c.TaskDir)
	if err != nil {
		return "", fmt.Errorf("listing containerd tasks: %w", err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.TaskDir, e.Name(), "config.json"))
		if err != nil {
			continue // a task being created or deleted
		}
		var spec struct {
			Annotations map[string]string `json:"annotations"`
		}
		if json.Unmarshal(b, &spec) != nil {
			continue
		}
		if spec.Annotations[annoContainerType] == "sandbox" && spec.Annotations[annoSandboxUID] == podUID {
			return e.Name(), nil
		}
	}
	return "", fmt.Errorf("no running pod sandbox for pod UID %s on this node: %w", podUID, os.ErrNotExist)
}

// RuntimeHash identifies the runsc build; a snapshot only restores with the
// same one.
func (c Checkpointer) RuntimeHash() (string, error) {
	path, err := exec.LookPath(c.Runsc)
	if err != nil {
		return "", fmt.Errorf("finding runsc: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("opening runsc: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing runsc: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Checkpoint saves the Pod's whole gVisor sandbox into the store (or onto
// r.Volume) and stops it (runsc checkpoint without --leave-running). runsc
// always writes into the node store, never into the tenant's volume (a
// symlink planted there would redirect root's writes). It writes into
// <id>.partial and publishes by rename after meta.json, so a crash at any
// point leaves either nothing or a complete snapshot. On error the partial
// files are removed (a full disk must not stay full).
func (c Checkpointer) Checkpoint(ctx context.Context, r Request) (Meta, error) {
	dir, err := c.Store.SnapshotDir(r.Namespace, r.SnapshotID)
	if err != nil {
		return Meta{}, err
	}
	id, err := c.FindPodSandbox(r.PodUID)
	if err != nil {
		return Meta{}, err
	}
	hash, err := c.RuntimeHash()
	if err != nil {
		return Meta{}, err
	}
	partial := dir + ".partial"
	if err := os.RemoveAll(partial); err != nil {
		return Meta{}, fmt.Errorf("clearing old partial snapshot: %w", err)
	}
	if err := os.MkdirAll(partial, 0o700); err != nil {
		return Meta{}, fmt.Errorf("creating snapshot dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(partial)
		}
	}()
	// Before the sandbox stops: from then on the shim refuses to start the
	// Pod again (see CheckpointedDir); a failed checkpoint lifts that.
	if err := c.markCheckpointed(r.PodUID, time.Now()); err != nil {
		return Meta{}, err
	}
	defer func() {
		if !ok {
			_ = os.Remove(filepath.Join(c.Store.Root, CheckpointedDir, r.PodUID))
		}
	}()
	var stderr bytes.Buffer
	// --exclude-committed-zero-pages: pages the application committed but
	// that hold only zeros again (freed arenas, cleared buffers) are left
	// out of pages.img and come back as zero pages on restore.
	cmd := exec.CommandContext(ctx, c.Runsc, "--root="+c.RunscRoot, "checkpoint", "--exclude-committed-zero-pages", "--image-path="+partial, id)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return Meta{}, checkpointError(id, err, stderr.String(), freeBytes(partial))
	}
	sums, sizes, err := hashFiles(partial)
	if err != nil {
		return Meta{}, err
	}
	m := Meta{Namespace: r.Namespace, SandboxName: r.SandboxName, SandboxUID: r.SandboxUID, SnapshotID: r.SnapshotID,
		RuntimeHash: hash, Files: sizes, SHA256: sums}
	b, _ := json.Marshal(m)
	if err := writeSynced(filepath.Join(partial, metaFile), b); err != nil {
		return Meta{}, err
	}
	m.Digest = MetaDigest(b)
	if r.Volume != nil {
		if err := publishToVolume(partial, r.Volume.path(), r.SnapshotID); err != nil {
			return Meta{}, err
		}
		// A snapshot left in the node store from before the Sandbox had
		// its volume there would only waste space.
		_ = os.RemoveAll(dir)
	} else {
		if err := os.RemoveAll(dir); err != nil {
			return Meta{}, fmt.Errorf("replacing old snapshot: %w", err)
		}
		if err := os.Rename(partial, dir); err != nil {
			return Meta{}, fmt.Errorf("publishing snapshot: %w", err)
		}
	}
	ok = true
	return m, nil
}

// CheckpointedDir (under the store root) holds one empty file per Pod UID
// whose sandbox a checkpoint stops: <root>/checkpointed/<pod-uid>. The
// hibernation shim refuses to create containers for such a Pod while the
// file is younger than CheckpointedTTL. Why: once the shim finishes the
// stopped sandbox's deletion at once, the kubelet would otherwise recreate
// the Pod's sandbox and start the workload afresh (restartPolicy Always) in
// the moment before the controller's deletion of the Pod arrives: a second,
// clean copy of the process that could write to the Sandbox's volume after
// its memory was saved. The controller deletes a checkpointed Pod within
// seconds, so the TTL only bounds a leftover (the layout is shared with
// hack/gvisor/hibernateshim/restore; keep the two in step).
const (
	CheckpointedDir = "checkpointed"
	CheckpointedTTL = 2 * time.Minute
)

// markCheckpointed writes the Pod's marker and prunes expired ones (so the
// directory holds at most the markers of the last TTL).
func (c Checkpointer) markCheckpointed(podUID string, now time.Time) error {
	if !safeComponent.MatchString(podUID) {
		return fmt.Errorf("invalid pod UID %q", podUID)
	}
	dir := filepath.Join(c.Store.Root, CheckpointedDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > CheckpointedTTL {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
		}
	}
	if err := writeSynced(filepath.Join(dir, podUID), nil); err != nil {
		return fmt.Errorf("marking pod %s checkpointed: %w", podUID, err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return f.Close()
}

// lowSpace is the free space below which a failed checkpoint is put down to
// a full destination: runsc writes until the filesystem refuses, so a
// checkpoint that died of ENOSPC leaves next to nothing free.
const lowSpace = 1 << 20

// checkpointError says why runsc checkpoint failed, in one line a condition
// and an event can carry. runsc's own report can be kilobytes long (a dump
// of the object it was serialising) with the cause at its end, so a full
// destination is named first, from the free space left (or ENOSPC in the
// report), and the report is cut in its middle, not its end. free < 0 means
// unknown.
func checkpointError(id string, err error, stderr string, free int64) error {
	report := firstLine(stderr, 512)
	if strings.Contains(stderr, "no space left on device") || (free >= 0 && free < lowSpace) {
		return fmt.Errorf("no space left on the snapshot's filesystem (%d KiB free after the attempt): runsc checkpoint %s: %w: %s", max(free, 0)>>10, id, err, report)
	}
	return fmt.Errorf("runsc checkpoint %s: %w: %s", id, err, report)
}

// freeBytes is the space left to unprivileged writers on path's filesystem,
// or -1 when it cannot be read.
func freeBytes(path string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * st.Bsize //nolint:gosec // block counts fit an int64 on every filesystem Linux mounts
}

// firstLine keeps an error report short enough for an annotation and a
// condition: its first line (runsc follows it with goroutine stacks), and of
// a long line its start and its end (where a Go error chain keeps its root
// cause).
func firstLine(s string, maxLen int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > maxLen {
		half := maxLen / 2
		s = s[:half] + " ... " + s[len(s)-half:]
	}
	return s
}

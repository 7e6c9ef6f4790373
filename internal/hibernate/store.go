// Package hibernate is deep hibernation's node side: it checkpoints a gVisor
// Pod's sandbox (memory, processes, file descriptors, root file system
// changes) into a node-local store with `runsc checkpoint`, and reads the
// per-Pod restore results that the hibernation shim
// (hack/gvisor/hibernateshim) records when a Pod carrying
// AnnotationRestoreSnapshot starts.
//
// Store layout (shared with hack/gvisor/hibernateshim/restore, a separate
// module that cannot import this one; keep the two in step):
//
//	<root>/snapshots/<namespace>/<snapshot-id>/  runsc image files + meta.json
//	<root>/results/<pod-uid>.json               the shim's decision per Pod
//	<root>/restoring/<pod-uid>/                 a volume snapshot being restored
//	<volume>/.agent-sandbox-snapshots/<snapshot-id>/  a snapshot on the Sandbox's PVC
//
// Lifetime: a node-store snapshot lives until the node agent deletes it:
// after the Pod restored from it is running, when its Sandbox is deleted, or
// with the store (the local cluster keeps it under its state dir, so `down
// --purge` removes it). A snapshot on the Sandbox's volume (volume.go) is
// consumed by the next restore (the shim moves it off the volume) and
// otherwise lives and dies with the PersistentVolumeClaim: deleting the
// Sandbox deletes its claims, and with them the snapshot.
package hibernate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

const (
	// AnnotationRestoreSnapshot on a Pod names the snapshot (in the Pod's
	// namespace) that the shim restores it from. Only the controller may set
	// it (k8s/admission ValidatingAdmissionPolicy).
	AnnotationRestoreSnapshot = "agents.x-k8s.io/restore-snapshot"

	metaFile = "meta.json"
)

// Restore result states written by the shim.
const (
	StateRestoring = "Restoring"
	StateRestored  = "Restored"
	StateFallback  = "Fallback"
)

var safeComponent = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Meta describes a complete snapshot. It is written last, so a snapshot
// without it (agent killed mid-checkpoint) is never restored.
type Meta struct {
	Namespace   string `json:"namespace"`
	SandboxName string `json:"sandboxName"`
	SandboxUID  string `json:"sandboxUID"`
	// SnapshotID is the snapshot's name (the Sandbox's UID): a snapshot
	// copied under another name is refused.
	SnapshotID  string           `json:"snapshotID,omitempty"`
	RuntimeHash string           `json:"runtimeHash"`
	Files       map[string]int64 `json:"files"`
	// SHA256 is each file's hex SHA-256.
	SHA256 map[string]string `json:"sha256,omitempty"`
	// Digest is MetaDigest of the written meta.json (not part of it).
	Digest string `json:"-"`
}

// Size is the snapshot's total size in bytes.
func (m Meta) Size() int64 {
	var n int64
	for _, s := range m.Files {
		n += s
	}
	return n
}

// Result is the shim's decision for one Pod.
type Result struct {
	Snapshot string `json:"snapshot"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
}

// Store is the node-local hibernation store.
type Store struct{ Root string }

// SnapshotDir is the directory of one snapshot; unsafe names are refused so
// no reference can point outside the store.
func (s Store) SnapshotDir(namespace, id string) (string, error) {
	if !safeComponent.MatchString(namespace) || !safeComponent.MatchString(id) {
		return "", fmt.Errorf("invalid snapshot reference %q/%q", namespace, id)
	}
	return filepath.Join(s.Root, "snapshots", namespace, id), nil
}

// ReadMeta returns a complete snapshot's metadata.
func (s Store) ReadMeta(namespace, id string) (Meta, error) {
	var m Meta
	dir, err := s.SnapshotDir(namespace, id)
	if err != nil {
		return m, err
	}
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return m, fmt.Errorf("reading snapshot metadata: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("decoding snapshot metadata: %w", err)
	}
	return m, nil
}

// DeleteSnapshot removes a snapshot; a missing one is not an error.
func (s Store) DeleteSnapshot(namespace, id string) error {
	dir, err := s.SnapshotDir(namespace, id)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting snapshot %s/%s: %w", namespace, id, err)
	}
	return os.RemoveAll(dir + ".partial")
}

// RestoreDir is where the shim moves a volume snapshot for the Pod podUID
// before checking and restoring it (the node store, which only root can
// write): <root>/restoring/<pod-uid>.
func (s Store) RestoreDir(podUID string) (string, error) {
	if !safeComponent.MatchString(podUID) {
		return "", fmt.Errorf("invalid pod UID %q", podUID)
	}
	return filepath.Join(s.Root, "restoring", podUID), nil
}

// DeleteRestoreDir removes a Pod's restore directory (the restored process
// keeps its image files open).
func (s Store) DeleteRestoreDir(podUID string) error {
	d, err := s.RestoreDir(podUID)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(d); err != nil {
		return fmt.Errorf("deleting restore dir of pod %s: %w", podUID, err)
	}
	return nil
}

// ReadResult returns the shim's decision for a Pod, or an error wrapping
// os.ErrNotExist when the shim has not (yet) decided.
func (s Store) ReadResult(podUID string) (Result, error) {
	var r Result
	if !safeComponent.MatchString(podUID) {
		return r, fmt.Errorf("invalid pod UID %q", podUID)
	}
	b, err := os.ReadFile(filepath.Join(s.Root, "results", podUID+".json"))
	if err != nil {
		return r, fmt.Errorf("reading restore result: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decoding restore result: %w", err)
	}
	return r, nil
}

// IsNotExist reports whether err means "nothing recorded".
func IsNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

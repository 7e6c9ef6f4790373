// Package restore is the shim side of agent-sandbox deep hibernation: it
// decides, once per Pod, whether the Pod's gVisor sandbox is restored from a
// checkpoint taken by the node agent (cmd/sandbox-hibernate-agent) or started
// clean, and records that decision where the node agent reads it.
//
// The on-disk layout is shared with sigs.k8s.io/agent-sandbox/internal/hibernate
// (which cannot be imported from this module); keep the two in step:
//
//	<root>/snapshots/<namespace>/<snapshot-id>/{checkpoint.img,pages*.img,...}
//	<root>/snapshots/<namespace>/<snapshot-id>/meta.json
//	<root>/results/<pod-uid>.json
//	<root>/checkpointed/<pod-uid>   (agent: this Pod's sandbox is being checkpointed; see stop.go)
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
	"regexp"
	"strings"
)

const (
	// AnnotationSnapshot names the snapshot a new Pod is restored from. It
	// is a Pod annotation passed to the OCI spec by containerd
	// (pod_annotations); admission lets only the controller set it.
	AnnotationSnapshot = "agents.x-k8s.io/restore-snapshot"

	// CRI annotations containerd puts on every OCI spec.
	annoContainerType = "io.kubernetes.cri.container-type"
	annoSandboxNS     = "io.kubernetes.cri.sandbox-namespace"
	annoSandboxUID    = "io.kubernetes.cri.sandbox-uid"
	annoSandboxID     = "io.kubernetes.cri.sandbox-id"
	containerTypePod  = "sandbox"

	// EnvRoot overrides DefaultRoot (containerd passes its env to shims).
	EnvRoot     = "AGENT_SANDBOX_HIBERNATE_DIR"
	DefaultRoot = "/var/lib/agent-sandbox/hibernate"
	metaFile    = "meta.json"
)

// Snapshot IDs and namespaces become path components: only DNS-label-like
// strings, so no value can walk out of the store.
var safeComponent = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// runsc names its image files e.g. pages_meta.img; no separators, no "..".
var safeFile = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Meta is written by the node agent after a complete checkpoint. A snapshot
// without it is incomplete (agent killed mid-checkpoint) and never restored.
type Meta struct {
	Namespace   string           `json:"namespace"`
	SandboxName string           `json:"sandboxName"`
	SandboxUID  string           `json:"sandboxUID"`
	SnapshotID  string           `json:"snapshotID,omitempty"`
	RuntimeHash string           `json:"runtimeHash"` // sha256 of the runsc binary that took it
	Files       map[string]int64 `json:"files"`       // name -> size, to catch truncation
	// SHA256 is each file's hex SHA-256 (checked for volume snapshots).
	SHA256 map[string]string `json:"sha256,omitempty"`
}

// Result is the per-Pod decision, written before the sandbox starts and
// updated once the restore has completed.
type Result struct {
	Snapshot string `json:"snapshot"`
	// State is StateRestoring (decided, in progress), StateRestored or
	// StateFallback (clean start; Reason says why).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

const (
	StateRestoring = "Restoring"
	StateRestored  = "Restored"
	StateFallback  = "Fallback"
)

// Store is a hibernation store rooted at a node-local directory.
type Store struct{ Root string }

// SnapshotDir returns the directory of a snapshot, refusing unsafe names.
func (s Store) SnapshotDir(namespace, id string) (string, error) {
	if !safeComponent.MatchString(namespace) || !safeComponent.MatchString(id) {
		return "", fmt.Errorf("invalid snapshot reference %q/%q", namespace, id)
	}
	return filepath.Join(s.Root, "snapshots", namespace, id), nil
}

func (s Store) resultPath(podUID string) (string, error) {
	if !safeComponent.MatchString(podUID) {
		return "", fmt.Errorf("invalid pod UID %q", podUID)
	}
	return filepath.Join(s.Root, "results", podUID+".json"), nil
}

// ReadResult returns the recorded decision for a Pod, or os.ErrNotExist.
func (s Store) ReadResult(podUID string) (Result, error) {
	var r Result
	p, err := s.resultPath(podUID)
	if err != nil {
		return r, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decoding %s: %w", p, err)
	}
	return r, nil
}

// WriteResult records a decision atomically (write + rename).
func (s Store) WriteResult(podUID string, r Result) error {
	p, err := s.resultPath(podUID)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("creating results dir: %w", err)
	}
	b, _ := json.Marshal(r)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("writing result: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("publishing result: %w", err)
	}
	return nil
}

// Validate checks that a snapshot is complete, belongs to namespace and was
// taken by this runtime. It returns the image path to hand to runsc restore.
func (s Store) Validate(namespace, id, runtimeHash string) (string, error) {
	dir, err := s.SnapshotDir(namespace, id)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("snapshot %s/%s is missing or incomplete", namespace, id)
		}
		return "", fmt.Errorf("reading snapshot metadata: %w", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("snapshot %s/%s metadata is corrupt: %w", namespace, id, err)
	}
	// The namespace in the path is the Pod's; the metadata is the agent's
	// record of whose sandbox it was. A mismatch means a copied directory.
	if m.Namespace != namespace {
		return "", fmt.Errorf("snapshot %s/%s belongs to namespace %q", namespace, id, m.Namespace)
	}
	if runtimeHash != "" && m.RuntimeHash != runtimeHash {
		return "", fmt.Errorf("snapshot %s/%s was taken by another runtime version", namespace, id)
	}
	if len(m.Files) == 0 {
		return "", fmt.Errorf("snapshot %s/%s lists no image files", namespace, id)
	}
	for name, size := range m.Files {
		if !safeFile.MatchString(name) || strings.Contains(name, "..") {
			return "", fmt.Errorf("snapshot %s/%s lists an invalid file %q", namespace, id, name)
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("snapshot %s/%s: %w", namespace, id, err)
		}
		if fi.Size() != size {
			return "", fmt.Errorf("snapshot %s/%s: %s is %d bytes, expected %d (truncated?)", namespace, id, name, fi.Size(), size)
		}
	}
	return dir, nil
}

// FileHash returns the hex sha256 of a file (the runtime binary).
func FileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Decision is what the shim does for one container.
type Decision struct {
	Restore   bool
	ImagePath string
}

// Decide is called at container creation with the OCI annotations. For the
// Pod's sandbox (pause) container it validates the snapshot and records the
// decision; every other container of the Pod follows that record, so either
// the whole Pod is restored or none of it.
func (s Store) Decide(annotations map[string]string, runtimeHash string) (Decision, error) {
	raw := annotations[AnnotationSnapshot]
	if raw == "" {
		return Decision{}, nil
	}
	ns, uid := annotations[annoSandboxNS], annotations[annoSandboxUID]
	ref, perr := ParseRef(raw)
	id := ref.ID
	if annotations[annoContainerType] == containerTypePod {
		if perr != nil {
			return Decision{}, s.WriteResult(uid, Result{Snapshot: raw, State: StateFallback, Reason: perr.Error()})
		}
		prev, err := s.ReadResult(uid)
		switch {
		case err == nil && prev.Snapshot == id:
			// A second pod sandbox for the same Pod: the first restore
			// failed or the sandbox died after it. Never retry a restore in a
			// loop; start clean and say so.
			r := Result{Snapshot: id, State: StateFallback, Reason: "restore was already attempted for this Pod (" + prev.State + "); starting clean"}
			if prev.State == StateFallback {
				r.Reason = prev.Reason
			}
			return Decision{}, s.WriteResult(uid, r)
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return Decision{}, err
		}
		var img string
		var verr error
		if ref.VolumePath != "" {
			img, verr = s.PrepareVolume(ns, uid, ref, runtimeHash)
		} else {
			img, verr = s.Validate(ns, id, runtimeHash)
		}
		if verr != nil {
			return Decision{}, s.WriteResult(uid, Result{Snapshot: id, State: StateFallback, Reason: verr.Error()})
		}
		if err := s.WriteResult(uid, Result{Snapshot: id, State: StateRestoring}); err != nil {
			return Decision{}, err
		}
		return Decision{Restore: true, ImagePath: img}, nil
	}
	if perr != nil {
		return Decision{}, nil
	}
	r, err := s.ReadResult(uid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Decision{}, nil
		}
		return Decision{}, err
	}
	if r.State != StateRestoring || r.Snapshot != id {
		return Decision{}, nil
	}
	var dir string
	if ref.VolumePath != "" {
		dir, err = s.RestoreDir(uid)
	} else {
		dir, err = s.SnapshotDir(ns, id)
	}
	if err != nil {
		return Decision{}, err
	}
	return Decision{Restore: true, ImagePath: dir}, nil
}

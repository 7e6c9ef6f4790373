package hibernate

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The controller and the node agent talk through annotations on the Pod
// being suspended or resumed. Admission (k8s/admission/hibernation-policy.yaml)
// lets only the controller set the request and restore annotations and only
// the node agent set the results, so a tenant can neither trigger a
// checkpoint of a Pod nor point a Pod at a snapshot.
const (
	// AnnotationCheckpointRequested (controller -> agent): checkpoint this
	// Pod's sandbox; the value is the RFC 3339 time of the request, from
	// which the controller times the agent out.
	AnnotationCheckpointRequested = "agents.x-k8s.io/checkpoint-requested-at"
	// AnnotationCheckpointResult (agent -> controller): a CheckpointResult.
	AnnotationCheckpointResult = "agents.x-k8s.io/checkpoint-result"
	// AnnotationRestoreResult (agent -> controller): a Result, copied from
	// what the shim recorded for the restored Pod.
	AnnotationRestoreResult = "agents.x-k8s.io/restore-result"
)

// CheckpointResult is the agent's answer to a checkpoint request. The
// snapshot's name is not part of it: the controller derives it from the
// Sandbox's UID, so a forged result cannot redirect a restore.
type CheckpointResult struct {
	OK         bool   `json:"ok"`
	SizeBytes  int64  `json:"sizeBytes,omitempty"`
	DurationMS int64  `json:"durationMs,omitempty"`
	Error      string `json:"error,omitempty"`
	// Digest is MetaDigest of the snapshot's meta.json.
	Digest string `json:"digest,omitempty"`
	// Volume and VolumePath say the snapshot is on the Pod's volume Volume,
	// found at VolumePath on the node (Volume.Ref); empty: the node store.
	Volume     string `json:"volume,omitempty"`
	VolumePath string `json:"volumePath,omitempty"`
}

// Encode returns the annotation value.
func (r CheckpointResult) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// DecodeCheckpointResult parses the annotation value.
func DecodeCheckpointResult(v string) (CheckpointResult, error) {
	var r CheckpointResult
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return r, fmt.Errorf("decoding %s: %w", AnnotationCheckpointResult, err)
	}
	return r, nil
}

// Encode returns the annotation value of a restore Result.
func (r Result) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// DecodeResult parses a restore-result annotation value.
func DecodeResult(v string) (Result, error) {
	var r Result
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return r, fmt.Errorf("decoding %s: %w", AnnotationRestoreResult, err)
	}
	return r, nil
}

// RestoreRef is the value of AnnotationRestoreSnapshot. A node-store
// snapshot is named by its ID alone (the value is the ID); one on a volume
// adds the digest the shim must find and the volume's host path:
//
//	<id>;digest=sha256:<hex>;volume=<host path>
//
// It is one annotation because containerd passes only the annotations
// listed in its runtime config (pod_annotations) to the shim, and because
// the admission policy already lets only the controller set it.
type RestoreRef struct {
	ID         string
	Digest     string
	VolumePath string
}

// Encode returns the annotation value.
func (r RestoreRef) Encode() string {
	if r.VolumePath == "" {
		return r.ID
	}
	return r.ID + ";digest=" + r.Digest + ";volume=" + r.VolumePath
}

// ParseRestoreRef parses an annotation value; the volume path comes last so
// that it may contain any character.
func ParseRestoreRef(v string) (RestoreRef, error) {
	id, rest, found := strings.Cut(v, ";")
	r := RestoreRef{ID: id}
	if !found {
		return r, nil
	}
	digest, vol, okVol := strings.Cut(rest, ";volume=")
	d, okDigest := strings.CutPrefix(digest, "digest=")
	if !okVol || !okDigest || vol == "" || !strings.HasPrefix(d, "sha256:") {
		return RestoreRef{}, fmt.Errorf("invalid %s value %q", AnnotationRestoreSnapshot, v)
	}
	r.Digest, r.VolumePath = d, vol
	return r, nil
}

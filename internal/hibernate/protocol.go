package hibernate

import (
	"encoding/json"
	"fmt"
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

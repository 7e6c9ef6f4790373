package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
)

// stopService finishes the deletion of a container whose gVisor sandbox is
// gone, as it is after the node agent's `runsc checkpoint` (which saves the
// sandbox and then stops it, outside the shim).
//
// Why: the checkpoint ends the sandbox's processes, the shim reports the
// container's exit, and containerd deletes the task at once. runsc refuses
// that first delete ("cannot delete container that is not stopped without
// --force flag"): its state file still says Running, and runsc only marks a
// container stopped once its sandbox's PID no longer exists, while the
// sandbox process is still exiting. containerd retries on its back-off
// (about 2 s, then 3 s; the second try also trips over the already removed
// rootfs filestore), and the kubelet's stop of the Pod waits for all of it:
// about 5 s on top of every deep suspend.
//
// The stock Delete is always tried first, so a container whose Delete
// works (every container that was not checkpointed, in normal operation)
// behaves exactly as before. Only when it fails, the task is stopped (the
// shim saw its init process exit) and the sandbox process it ran in has
// really gone (observed by its PID, not by a name), the stock Delete is
// repeated, which is what containerd's back-off would do seconds later: the
// retries go through gVisor's own clean-up (runsc marks the container
// stopped and destroys it; a state that is already gone counts as deleted).
type stopService struct {
	extension.TaskServiceExt
	// exitWait bounds how long a failed Delete waits for the sandbox
	// process to finish exiting (a checkpointed sandbox is already tearing
	// down; a live one never qualifies).
	exitWait time.Duration
	// alive reports whether a process exists (a zombie counts: runsc
	// checks the same way, with signal 0).
	alive func(pid int) bool
}

// Defaults: a checkpointed sandbox of a few GiB unmaps its memory in well
// under this; containerd's own first retry comes about 2 s after the exit.
const (
	sandboxExitWait = 2 * time.Second
	deleteAttempts  = 3
	exitPoll        = 10 * time.Millisecond
)

func newStopService(next extension.TaskServiceExt) *stopService {
	return &stopService{TaskServiceExt: next, exitWait: sandboxExitWait, alive: processExists}
}

func processExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func (s *stopService) Delete(ctx context.Context, r *task.DeleteRequest) (*task.DeleteResponse, error) {
	resp, err := s.TaskServiceExt.Delete(ctx, r)
	if err == nil || r.ExecID != "" {
		return resp, err
	}
	pid, ok := s.stoppedSandboxPid(ctx, r.ID)
	if !ok {
		return resp, err
	}
	if !s.waitGone(ctx, pid) {
		return resp, err
	}
	for i := 1; i < deleteAttempts; i++ {
		resp, err = s.TaskServiceExt.Delete(ctx, r)
		if err == nil {
			return resp, nil
		}
	}
	return resp, fmt.Errorf("deleting container %s whose sandbox (pid %d) has exited: %w", r.ID, pid, err)
}

// stoppedSandboxPid returns the PID the shim reports for the container's
// init process (for runsc that is the sandbox process) when the shim has
// seen that process exit.
func (s *stopService) stoppedSandboxPid(ctx context.Context, id string) (int, bool) {
	st, err := s.TaskServiceExt.State(ctx, &task.StateRequest{ID: id})
	if err != nil || st.Status != tasktypes.Status_STOPPED || st.Pid == 0 {
		return 0, false
	}
	return int(st.Pid), true
}

// waitGone polls until the process no longer exists, for at most exitWait.
func (s *stopService) waitGone(ctx context.Context, pid int) bool {
	deadline := time.Now().Add(s.exitWait)
	for s.alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(exitPoll):
		}
	}
	return true
}

// The node agent marks a Pod whose sandbox it checkpoints (and so stops):
// <root>/checkpointed/<pod-uid>, by the Pod's UID, in the root-only store.
// Layout shared with internal/hibernate (CheckpointedDir, CheckpointedTTL).
const (
	checkpointedDir = "checkpointed"
	checkpointedTTL = 2 * time.Minute
)

// refuseCheckpointed fails the creation of any container of a Pod the node
// agent has just checkpointed. Why: the checkpoint stops the sandbox, and
// stopService lets the kubelet see that at once; the kubelet would then
// recreate the Pod's sandbox and start the workload afresh (restartPolicy
// Always) before the controller's deletion of the Pod arrives, a clean
// second copy that could change the Sandbox's volume after its memory was
// saved. The kubelet retries on its back-off until the deletion lands. A
// marker older than the TTL is a leftover and ignored.
func (s Store) refuseCheckpointed(podUID string, now time.Time) error {
	if !safeComponent.MatchString(podUID) {
		return nil // not a CRI pod container (no UID to match)
	}
	fi, err := os.Stat(filepath.Join(s.Root, checkpointedDir, podUID))
	if err != nil || now.Sub(fi.ModTime()) > checkpointedTTL {
		return nil
	}
	return fmt.Errorf("hibernate: pod %s was checkpointed at %s and is being deleted; not starting it again",
		podUID, fi.ModTime().UTC().Format(time.RFC3339))
}

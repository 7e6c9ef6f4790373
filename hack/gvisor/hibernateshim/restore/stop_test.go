package restore

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
)

// fakeShim stands in for the stock gVisor task service (pure logic: what
// stopService does with its answers). Unimplemented methods panic.
type fakeShim struct {
	extension.TaskServiceExt
	deleteErrs []error // one per Delete call; past the end, success
	deletes    int
	states     int
	status     tasktypes.Status
	pid        uint32
}

var errNotStopped = errors.New("failed to delete task: cannot delete container that is not stopped without --force flag")

func (f *fakeShim) Delete(_ context.Context, r *task.DeleteRequest) (*task.DeleteResponse, error) {
	f.deletes++
	if f.deletes <= len(f.deleteErrs) && f.deleteErrs[f.deletes-1] != nil {
		return nil, f.deleteErrs[f.deletes-1]
	}
	return &task.DeleteResponse{Pid: f.pid}, nil
}

func (f *fakeShim) State(_ context.Context, r *task.StateRequest) (*task.StateResponse, error) {
	f.states++
	return &task.StateResponse{ID: r.ID, Status: f.status, Pid: f.pid}, nil
}

// aliveFor reports the process alive for the first n checks, then gone: a
// sandbox still exiting when containerd first deletes its task.
func aliveFor(n int) func(int) bool {
	return func(int) bool {
		n--
		return n >= 0
	}
}

func TestStopServiceFinishesDeleteOfCheckpointedSandbox(t *testing.T) {
	// What containerd's log shows after a checkpoint: the first delete is
	// refused (state says Running), the second trips over the filestore the
	// first clean-up removed, the third finds the state gone and succeeds.
	f := &fakeShim{status: tasktypes.Status_STOPPED, pid: 4242,
		deleteErrs: []error{errNotStopped, errors.New("destroying container: failed to delete filestore file: no such file or directory")}}
	s := &stopService{TaskServiceExt: f, exitWait: time.Second, alive: aliveFor(3)}
	resp, err := s.Delete(context.Background(), &task.DeleteRequest{ID: "c1"})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if resp.Pid != 4242 || f.deletes != 3 {
		t.Fatalf("pid %d after %d deletes, want 4242 after 3", resp.Pid, f.deletes)
	}
}

func TestStopServiceLeavesOtherDeletesAlone(t *testing.T) {
	for _, tc := range []struct {
		name        string
		f           *fakeShim
		req         *task.DeleteRequest
		alive       func(int) bool
		wantErr     bool
		wantDeletes int
		wantStates  int
	}{
		{name: "delete works: one call, no extra state query",
			f:   &fakeShim{status: tasktypes.Status_STOPPED, pid: 7},
			req: &task.DeleteRequest{ID: "c1"}, alive: aliveFor(0), wantDeletes: 1},
		{name: "sandbox still alive (not checkpointed): stock error, no retry",
			f:   &fakeShim{status: tasktypes.Status_STOPPED, pid: 7, deleteErrs: []error{errNotStopped}},
			req: &task.DeleteRequest{ID: "c1"}, alive: func(int) bool { return true }, wantErr: true, wantDeletes: 1, wantStates: 1},
		{name: "task still running: stock error, no retry",
			f:   &fakeShim{status: tasktypes.Status_RUNNING, pid: 7, deleteErrs: []error{errNotStopped}},
			req: &task.DeleteRequest{ID: "c1"}, alive: aliveFor(0), wantErr: true, wantDeletes: 1, wantStates: 1},
		{name: "no pid known: stock error, no retry",
			f:   &fakeShim{status: tasktypes.Status_STOPPED, deleteErrs: []error{errNotStopped}},
			req: &task.DeleteRequest{ID: "c1"}, alive: aliveFor(0), wantErr: true, wantDeletes: 1, wantStates: 1},
		{name: "exec process: stock error, untouched",
			f:   &fakeShim{status: tasktypes.Status_STOPPED, pid: 7, deleteErrs: []error{errNotStopped}},
			req: &task.DeleteRequest{ID: "c1", ExecID: "e1"}, alive: aliveFor(0), wantErr: true, wantDeletes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stopService{TaskServiceExt: tc.f, exitWait: 50 * time.Millisecond, alive: tc.alive}
			_, err := s.Delete(context.Background(), tc.req)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errNotStopped) {
				t.Fatalf("err = %v, want the stock error unchanged", err)
			}
			if tc.f.deletes != tc.wantDeletes || tc.f.states != tc.wantStates {
				t.Fatalf("%d deletes, %d state queries; want %d, %d", tc.f.deletes, tc.f.states, tc.wantDeletes, tc.wantStates)
			}
		})
	}
}

func TestStopServiceGivesUpWithTheCause(t *testing.T) {
	cause := errors.New("failed rootfs umount: device or resource busy")
	f := &fakeShim{status: tasktypes.Status_STOPPED, pid: 9, deleteErrs: []error{errNotStopped, cause, cause}}
	s := &stopService{TaskServiceExt: f, exitWait: time.Second, alive: aliveFor(0)}
	_, err := s.Delete(context.Background(), &task.DeleteRequest{ID: "c1"})
	if !errors.Is(err, cause) || f.deletes != deleteAttempts {
		t.Fatalf("err = %v after %d deletes; want %v after %d", err, f.deletes, cause, deleteAttempts)
	}
}

func TestProcessExists(t *testing.T) {
	if !processExists(os.Getpid()) {
		t.Fatal("this process does not exist")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil { // Run reaps it
		t.Fatal(err)
	}
	if processExists(cmd.Process.Pid) {
		t.Fatalf("reaped child %d still exists", cmd.Process.Pid)
	}
}

// Every container gets the stop handling, not only restored ones: the Pod
// that is checkpointed was started clean.
func TestNewExtensionWrapsEveryContainer(t *testing.T) {
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"annotations":{"io.kubernetes.cri.container-type":"container"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	next := &fakeShim{}
	ext, err := NewExtension(context.Background(), next, &task.CreateTaskRequest{ID: "c1", Bundle: bundle})
	if err != nil {
		t.Fatal(err)
	}
	st, ok := ext.(*stopService)
	if !ok || st.TaskServiceExt != next {
		t.Fatalf("NewExtension = %T, want *stopService over the stock service", ext)
	}
}

func TestRefuseCheckpointed(t *testing.T) {
	s := Store{Root: t.TempDir()}
	now := time.Now()
	mark := func(uid string, at time.Time) {
		t.Helper()
		p := filepath.Join(s.Root, checkpointedDir, uid)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	mark("uid-fresh", now.Add(-time.Second))
	mark("uid-stale", now.Add(-checkpointedTTL-time.Second))
	if err := s.refuseCheckpointed("uid-fresh", now); err == nil {
		t.Fatal("a Pod checkpointed a second ago may start again")
	}
	for _, uid := range []string{"uid-stale", "uid-other", "", "../checkpointed/uid-fresh"} {
		if err := s.refuseCheckpointed(uid, now); err != nil {
			t.Fatalf("pod %q refused: %v", uid, err)
		}
	}
}

// The kubelet's re-creation of a checkpointed Pod's sandbox fails at the
// shim's Create; a new Pod (another UID, e.g. the restored one) is not
// affected.
func TestNewExtensionRefusesACheckpointedPod(t *testing.T) {
	root := t.TempDir()
	t.Setenv(EnvRoot, root)
	if err := os.MkdirAll(filepath.Join(root, checkpointedDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, checkpointedDir, "pod-a"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	create := func(uid string) error {
		bundle := t.TempDir()
		spec := `{"annotations":{"io.kubernetes.cri.container-type":"sandbox","io.kubernetes.cri.sandbox-uid":"` + uid + `"}}`
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := NewExtension(context.Background(), &fakeShim{}, &task.CreateTaskRequest{ID: "s1", Bundle: bundle})
		return err
	}
	if err := create("pod-a"); err == nil {
		t.Fatal("the checkpointed Pod's sandbox was created again")
	}
	if err := create("pod-b"); err != nil {
		t.Fatalf("another Pod refused: %v", err)
	}
}

package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	task "github.com/containerd/containerd/api/runtime/task/v2"
	"gvisor.dev/gvisor/pkg/shim/v1/extension"
)

// runtimeHash is computed once per shim process (one shim serves one Pod).
var runtimeHash = sync.OnceValue(func() string {
	p, err := exec.LookPath("runsc")
	if err != nil {
		return ""
	}
	h, err := FileHash(p)
	if err != nil {
		return ""
	}
	return h
})

func storeFromEnv() Store {
	if r := os.Getenv(EnvRoot); r != "" {
		return Store{Root: r}
	}
	return Store{Root: DefaultRoot}
}

// NewExtension is installed as extension.NewExtension. The shim calls it on
// every container Create and routes all later calls (for every container of
// the Pod, the last Create's extension wins) through what it returns. Every
// container gets stopService, which only acts on a Delete the stock shim
// failed because the sandbox has gone (a checkpoint); a Pod with the restore
// annotation additionally gets restoringService.
func NewExtension(ctx context.Context, next extension.TaskServiceExt, req *task.CreateTaskRequest) (extension.TaskServiceExt, error) {
	ext, err := newExtension(next, req)
	if err != nil || ext != nil {
		return ext, err
	}
	return newStopService(next), nil
}

func newExtension(next extension.TaskServiceExt, req *task.CreateTaskRequest) (extension.TaskServiceExt, error) {
	b, err := os.ReadFile(filepath.Join(req.Bundle, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("hibernate: reading OCI spec: %w", err)
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("hibernate: decoding OCI spec: %w", err)
	}
	st := storeFromEnv()
	if err := st.refuseCheckpointed(spec.Annotations[annoSandboxUID], time.Now()); err != nil {
		return nil, err
	}
	if spec.Annotations[AnnotationSnapshot] == "" {
		return nil, nil
	}
	d, err := st.Decide(spec.Annotations, runtimeHash())
	if err != nil {
		return nil, fmt.Errorf("hibernate: %w", err)
	}
	if !d.Restore {
		return nil, nil
	}
	ref, _ := ParseRef(spec.Annotations[AnnotationSnapshot]) // Decide refused an unparsable one
	return &restoringService{TaskServiceExt: newStopService(next), id: req.ID, image: d.ImagePath,
		store: st, podUID: spec.Annotations[annoSandboxUID], snapshot: ref.ID,
		sandboxID: spec.Annotations[annoSandboxID],
		pod:       spec.Annotations[annoContainerType] == containerTypePod}, nil
}

// restoringService turns the Start of one container's init process into a
// restore from the snapshot; every other call goes to the stock shim.
type restoringService struct {
	extension.TaskServiceExt
	id, image        string
	store            Store
	podUID, snapshot string
	sandboxID        string // the Pod sandbox (pause) container's ID
	pod              bool
}

func (s *restoringService) Start(ctx context.Context, r *task.StartRequest) (*task.StartResponse, error) {
	if r.ID != s.id || r.ExecID != "" {
		return s.TaskServiceExt.Start(ctx, r)
	}
	// Background: runsc restore returns once the sandbox's state is back
	// and loads the memory pages while the processes already run (the
	// checkpoint is uncompressed), so the first answer does not wait for
	// every page of a large heap. The image files stay readable through
	// the open descriptors after the agent deletes the consumed snapshot.
	resp, err := s.TaskServiceExt.Restore(ctx, &extension.RestoreRequest{Start: r, Conf: extension.RestoreConfig{ImagePath: s.image, Background: true}})
	if err != nil {
		if !s.pod {
			// The sandbox now waits for a restore that cannot happen, and a
			// container retry would fail the same way forever. Record the
			// fallback and stop the Pod sandbox: the kubelet recreates it,
			// and Decide starts the new one clean.
			_ = s.store.WriteResult(s.podUID, Result{Snapshot: s.snapshot, State: StateFallback, Reason: "restore failed: " + err.Error()})
			if s.sandboxID != "" {
				_, _ = s.TaskServiceExt.Kill(ctx, &task.KillRequest{ID: s.sandboxID, Signal: 9, All: true})
			}
		}
		return nil, err
	}
	if !s.pod {
		// gVisor resumes the sandbox when its last container is restored;
		// a pod has one app container here, so this is the completion.
		_ = s.store.WriteResult(s.podUID, Result{Snapshot: s.snapshot, State: StateRestored})
	}
	return resp, nil
}

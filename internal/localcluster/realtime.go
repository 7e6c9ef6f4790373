package localcluster

import (
	"errors"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/agent-sandbox/internal/cpuclass"
)

// ensureControlPlaneBudget gives the control plane's CPU group its
// real-time budget (cpuagent.go), or says why the host offers none.
func ensureControlPlaneBudget() error {
	mnt, v2, err := cpuCgroupMount()
	if err != nil {
		return err
	}
	if v2 {
		return errors.New("cgroup v2 has no real-time group budgets")
	}
	if err := cpuclass.Supported(mnt); err != nil {
		return err
	}
	return cpuclass.SetBudget(filepath.Join(mnt, cpuGroupControlPlane), controlPlaneBudget)
}

// setSchedClass puts every thread of a component's process in the class its
// spec asks for. It runs after the process joined its CPU group, whose
// budget a real-time thread needs; new threads inherit the class from the
// thread that starts them.
func setSchedClass(spec procSpec, pid int) error {
	if _, err := cpuclass.SetThreads(cpuclass.ProcessThreads(pid), cpuclass.Policy{Realtime: spec.realtime}); err != nil {
		return fmt.Errorf("scheduling class of %s (pid %d): %w", spec.name, pid, err)
	}
	return nil
}

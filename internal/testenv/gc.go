package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// GarbageCollector runs the real kube-controller-manager with only its
// garbage collector (and PVC protection, which releases deleted claims) against
// the test apiserver, so owner references cascade
// deletes as on a real cluster (envtest alone never deletes dependents).
type GarbageCollector struct {
	cmd     *exec.Cmd
	logPath string
	done    chan error
}

// StartGarbageCollector starts kube-controller-manager --controllers=garbagecollector.
// extraArgs are appended to its flags (e.g. --kube-api-qps: the default
// 20 QPS bounds how fast a mass deletion cascades).
func (e *Env) StartGarbageCollector(extraArgs ...string) (*GarbageCollector, error) {
	bin := filepath.Join(e.AssetsDir, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kube-controller-manager missing in %s: run `make deps-test`: %w", e.AssetsDir, err)
	}
	log, err := os.CreateTemp("", "testenv-kcm-*.log")
	if err != nil {
		return nil, fmt.Errorf("creating log: %w", err)
	}
	cmd := exec.Command(bin, append([]string{
		"--kubeconfig=" + e.Kubeconfig,
		"--controllers=garbage-collector-controller,persistentvolumeclaim-protection-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-gc-syncs=20",
		"--use-service-account-credentials=false",
	}, extraArgs...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	gc := &GarbageCollector{cmd: cmd, logPath: log.Name(), done: make(chan error, 1)}
	go func() { gc.done <- cmd.Wait(); _ = log.Close() }()
	// Fail fast on a bad flag instead of waiting for a cascade that never comes.
	select {
	case err := <-gc.done:
		out, _ := os.ReadFile(gc.logPath)
		return nil, fmt.Errorf("kube-controller-manager exited: %w\n%s", err, out)
	case <-time.After(500 * time.Millisecond):
	}
	return gc, nil
}

// Stop stops the garbage collector.
func (g *GarbageCollector) Stop() {
	_ = g.cmd.Process.Kill()
	<-g.done //nolint:errcheck // killed: Wait's error only says so
	_ = os.Remove(g.logPath)
}

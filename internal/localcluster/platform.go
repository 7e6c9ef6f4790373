package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// gVisor platforms the local node can run sandboxes on. kvm runs the Sentry
// as a guest kernel and handles application syscalls as VM exits; systrap
// intercepts them with seccomp and works on any Linux host.
const (
	PlatformAuto    = "auto"
	PlatformKVM     = "kvm"
	PlatformSystrap = "systrap"
)

// Environment variables that steer the platform choice of Up.
const (
	// EnvGVisorPlatform is auto (default), kvm or systrap.
	EnvGVisorPlatform = "AGENT_SANDBOX_GVISOR_PLATFORM"
	// EnvKVMDevice is the KVM device the probe and runsc use (default
	// /dev/kvm). Pointing it at a missing path forces the systrap fallback.
	EnvKVMDevice = "AGENT_SANDBOX_KVM_DEVICE"
)

const (
	defaultKVMDevice = "/dev/kvm"
	// defaultKVMProbeTimeout bounds the kvm smoke run. `runsc do /bin/true`
	// takes about 0.2 s on systrap here and a few seconds under heavy load;
	// a kvm sandbox that has not finished by then is hung (see
	// docs/performance.md#gvisor-platform), and waiting longer only burns
	// the vCPU thread's core.
	defaultKVMProbeTimeout = 10 * time.Second
)

// PlatformChoice is the gVisor platform Up configured for the node, and why.
type PlatformChoice struct {
	Platform string `json:"platform"`
	Reason   string `json:"reason"`
	// Requested is what the user asked for (auto, kvm or systrap).
	Requested string `json:"requested"`
	// DecidedAt is when Up made this choice.
	DecidedAt time.Time `json:"decidedAt"`
	// Key identifies the inputs of the decision (kernel, boot, runsc
	// binary, device, request): Up probes again only when it changes.
	Key string `json:"key"`
}

func (c Config) gvisorPlatformRequest() string {
	if c.GVisorPlatform != "" {
		return c.GVisorPlatform
	}
	return envOr(EnvGVisorPlatform, PlatformAuto)
}

func (c Config) kvmDevice() string {
	if c.KVMDevice != "" {
		return c.KVMDevice
	}
	return envOr(EnvKVMDevice, defaultKVMDevice)
}

func (c Config) kvmProbeTimeout() time.Duration {
	if c.KVMProbeTimeout > 0 {
		return c.KVMProbeTimeout
	}
	return defaultKVMProbeTimeout
}

// platformRecord is where Up keeps its choice. It is under RunDir (tmpfs), so
// a reboot, after which KVM may behave differently, forgets it; `status`
// reads it without root.
func (c Config) platformRecord() string { return filepath.Join(c.RunDir, "gvisor-platform.json") }

// platformMemo is the same choice kept under StateDir: `down` removes RunDir,
// and without a copy that outlives it every `down` + `up` would pay a hung
// probe again. Its key holds the boot ID, so a reboot still decides anew;
// `down --purge` removes it with the rest of the state.
func (c Config) platformMemo() string { return filepath.Join(c.StateDir, "gvisor-platform.json") }

// ReadPlatformChoice returns the platform the last Up chose; (nil, nil) when
// no Up recorded one.
func (c Config) ReadPlatformChoice() (*PlatformChoice, error) {
	return readPlatformChoice(c.platformRecord())
}

func readPlatformChoice(path string) (*PlatformChoice, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read gVisor platform record: %w", err)
	}
	var pc PlatformChoice
	if err := json.Unmarshal(data, &pc); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return &pc, nil
}

// kvmProbe is the result of one kvm smoke run.
type kvmProbe struct {
	Took time.Duration
	Err  error
}

// decidePlatform is the choice itself, free of I/O so it can be tested on
// every branch: requested is auto, kvm or systrap; deviceErr says whether the
// KVM device can be opened; probe runs the real kvm smoke and is only called
// when its answer matters.
func decidePlatform(requested string, deviceErr error, probe func() kvmProbe) (PlatformChoice, error) {
	pc := PlatformChoice{Requested: requested}
	switch requested {
	case PlatformSystrap:
		pc.Platform, pc.Reason = PlatformSystrap, "requested"
		return pc, nil
	case PlatformKVM, PlatformAuto:
	default:
		return pc, userError(nil, "use auto, kvm or systrap", "unknown gVisor platform %q", requested)
	}
	if deviceErr != nil {
		if requested == PlatformKVM {
			return pc, userError(deviceErr, "use --gvisor-platform=systrap, or give runsc access to a KVM device", "gVisor platform kvm requested, but KVM is unusable")
		}
		pc.Platform, pc.Reason = PlatformSystrap, "fallback: KVM unusable: "+deviceErr.Error()
		return pc, nil
	}
	r := probe()
	if r.Err != nil {
		if requested == PlatformKVM {
			return pc, userError(r.Err, "use --gvisor-platform=systrap (see docs/performance.md#gvisor-platform)", "gVisor platform kvm requested, but its smoke test failed")
		}
		pc.Platform, pc.Reason = PlatformSystrap, "fallback: kvm smoke test failed: "+r.Err.Error()
		return pc, nil
	}
	pc.Platform = PlatformKVM
	pc.Reason = fmt.Sprintf("kvm smoke test passed in %s", r.Took.Round(time.Millisecond))
	if requested == PlatformKVM {
		pc.Reason = "requested; " + pc.Reason
	}
	return pc, nil
}

// checkKVMDevice opens the device the way runsc does (read-write).
func checkKVMDevice(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err // names the path already
	}
	return f.Close()
}

// probeRunsc runs `runsc --platform=<platform> do /bin/true` in a root of its
// own, so it never sees the cluster's containers, and kills it after timeout:
// a hung platform (kvm here spins in KVM_RUN forever) must never block Up.
func probeRunsc(ctx context.Context, runsc, platform, device string, timeout time.Duration) kvmProbe {
	root, err := os.MkdirTemp("", "agent-sandbox-platform-probe-")
	if err != nil {
		return kvmProbe{Err: fmt.Errorf("probe root: %w", err)}
	}
	cgroupsBefore := runscCgroups(cgroupFS)
	defer func() {
		cleanupProbe(root)
		removeNewCgroups(cgroupFS, cgroupsBefore, time.Second)
	}()
	// Output goes to a file, not a pipe: a pipe held open by a sandbox
	// that outlives runsc would keep Wait from returning.
	out, err := os.Create(filepath.Join(root, "output"))
	if err != nil {
		return kvmProbe{Err: fmt.Errorf("probe output: %w", err)}
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"--root=" + filepath.Join(root, "state"), "--network=none", "--platform=" + platform}
	if platform == PlatformKVM && device != defaultKVMDevice {
		args = append(args, "--platform_device_path="+device)
	}
	args = append(args, "do", "/bin/true")
	cmd := exec.Command(runsc, args...)
	// `runsc do` keeps its bundle, sandbox root and a bind mount in a temp
	// dir of its own; TMPDIR puts that inside ours, where cleanupProbe
	// finds it even after a kill.
	cmd.Env = append(os.Environ(), "TMPDIR="+root)
	// Its own process group, so a timeout kills runsc and everything it
	// started (gofer, sandbox), not just the parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return kvmProbe{Err: fmt.Errorf("start runsc: %w", err)}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// The sandbox may have left the group; its descendants are
		// found by parentage before the parent dies.
		kids := descendants(cmd.Process.Pid)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, pid := range kids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-done //nolint:errcheck // killed: Wait's error only says so
		if ctx.Err() == context.DeadlineExceeded {
			return kvmProbe{Took: time.Since(start), Err: fmt.Errorf("runsc --platform=%s do /bin/true did not finish within %s (hung)", platform, timeout)}
		}
		return kvmProbe{Took: time.Since(start), Err: ctx.Err()}
	}
	took := time.Since(start)
	if err != nil {
		msg, _ := os.ReadFile(out.Name())
		m := strings.TrimSpace(string(msg))
		if len(m) > 300 {
			m = m[len(m)-300:]
		}
		return kvmProbe{Took: took, Err: fmt.Errorf("runsc --platform=%s do /bin/true: %w: %s", platform, err, m)}
	}
	return kvmProbe{Took: took}
}

// descendants lists the processes below pid, children first.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: fields
		// start after the last ')'.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	frontier := []int{pid}
	for len(frontier) > 0 {
		next := frontier[0]
		frontier = frontier[1:]
		for p, pp := range parent {
			if pp == next {
				out = append(out, p)
				frontier = append(frontier, p)
			}
		}
	}
	return out
}

// cleanupProbe kills whatever still runs from the probe's root (matched by
// that unique path on the command line, never by a name), unmounts what
// runsc left mounted there and removes it.
func cleanupProbe(root string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), root+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = unmountUnder(root)
	_ = os.RemoveAll(root)
}

// cgroupFS is where the cgroup hierarchies are mounted.
var cgroupFS = "/sys/fs/cgroup" // a variable for tests

// runscCgroups lists the cgroups `runsc do` makes for its sandbox: a
// runsc-<number> directory at the top of every hierarchy (cgroup v1: one
// per controller; v2: one). Killed on a hang, runsc leaves them behind.
func runscCgroups(fs string) map[string]bool {
	out := map[string]bool{}
	for _, pattern := range []string{filepath.Join(fs, "runsc-*"), filepath.Join(fs, "*", "runsc-*")} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				out[m] = true
			}
		}
	}
	return out
}

// removeNewCgroups removes the runsc cgroups that appeared since before
// was listed: the probe's own. rmdir only removes a cgroup without tasks,
// so one whose processes are still exiting after the kill is retried
// until wait has passed; one still busy then is left, never forced.
func removeNewCgroups(fs string, before map[string]bool, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for {
		left := 0
		for path := range runscCgroups(fs) {
			if before[path] {
				continue
			}
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// platformKey names everything the decision depends on. The boot ID makes a
// reboot (new kernel, different KVM module) probe again.
func (c *Cluster) platformKey(requested, device string) string {
	h := sha256.New()
	fmt.Fprintln(h, requested, device)
	for _, f := range []string{"/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/osrelease"} {
		data, _ := os.ReadFile(f)
		h.Write(data)
	}
	fmt.Fprintln(h, c.bins.Runsc)
	if st, err := os.Stat(c.bins.Runsc); err == nil {
		fmt.Fprintln(h, st.Size(), st.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// choosePlatform decides the node's gVisor platform, reusing the recorded
// choice when none of its inputs changed (the probe of a hung kvm costs its
// full timeout), and records the result.
func (c *Cluster) choosePlatform(ctx context.Context) (PlatformChoice, error) {
	requested, device := c.cfg.gvisorPlatformRequest(), c.cfg.kvmDevice()
	key := c.platformKey(requested, device)
	if old, err := c.cfg.ReadPlatformChoice(); err == nil && old != nil && old.Key == key {
		return *old, nil
	}
	if old, err := readPlatformChoice(c.cfg.platformMemo()); err == nil && old != nil && old.Key == key {
		return *old, writePlatformChoice(c.cfg.platformRecord(), *old, 0o644)
	}
	pc, err := decidePlatform(requested, checkKVMDevice(device), func() kvmProbe {
		c.step("gVisor platform: probing kvm (runsc --platform=kvm do /bin/true, timeout %s)", c.cfg.kvmProbeTimeout())
		return probeRunsc(ctx, c.bins.Runsc, PlatformKVM, device, c.cfg.kvmProbeTimeout())
	})
	if err != nil {
		return pc, err
	}
	pc.DecidedAt = time.Now().UTC().Truncate(time.Second)
	if pc.Platform == PlatformSystrap && strings.HasPrefix(pc.Reason, "fallback: kvm smoke test failed") && kvmIsPVM() {
		// The known cause on this kind of VM, so `status` can say it.
		pc.Reason += " (/dev/kvm is the kvm_pvm software hypervisor, which runsc's kvm platform does not run on)"
	}
	pc.Key = key
	// `status` reads the record without root; the memo goes only into a
	// StateDir Up has made (0700, it holds keys), never created here with a
	// looser mode.
	if err := writePlatformChoice(c.cfg.platformRecord(), pc, 0o644); err != nil {
		return pc, err
	}
	if st, err := os.Stat(c.cfg.StateDir); err == nil && st.IsDir() {
		if err := writePlatformChoice(c.cfg.platformMemo(), pc, 0o600); err != nil {
			return pc, err
		}
	}
	return pc, nil
}

func writePlatformChoice(path string, pc PlatformChoice, perm os.FileMode) error {
	data, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode gVisor platform record: %w", err)
	}
	return writeFileIfChanged(path, append(data, '\n'), perm)
}

// kvmIsPVM reports whether KVM here is PVM (pagetable-based virtualisation,
// for VMs without VMX/SVM), under which runsc's kvm platform hangs.
func kvmIsPVM() bool {
	_, err := os.Stat("/sys/module/kvm_pvm")
	return err == nil
}

// runscPlatform is the platform runsc.toml names: the one Up chose, systrap
// if it has not chosen yet (systrap runs everywhere).
func (c *Cluster) runscPlatform() string {
	if c.platform.Platform != "" {
		return c.platform.Platform
	}
	return PlatformSystrap
}

// runscPlatformOptions are the extra runsc.toml lines for the chosen
// platform: only a non-default KVM device.
func (c *Cluster) runscPlatformOptions() string {
	if c.runscPlatform() == PlatformKVM && c.cfg.kvmDevice() != defaultKVMDevice {
		return fmt.Sprintf("  platform_device_path = %q\n", c.cfg.kvmDevice())
	}
	return ""
}

// ChooseGVisorPlatform runs the platform decision of Up on its own (the kvm
// probe included) and records it under the Config's RunDir (and StateDir,
// when that exists); a Config with directories of its own leaves a running
// cluster's record alone.
func (c *Cluster) ChooseGVisorPlatform(ctx context.Context) (PlatformChoice, error) {
	bins, err := c.cfg.locateBinaries()
	if err != nil {
		return PlatformChoice{}, err
	}
	c.bins = bins
	return c.choosePlatform(ctx)
}

// RunscConfigPath is the runsc.toml the gVisor shim reads.
func (c *Cluster) RunscConfigPath() string { return c.runscConfigPath() }

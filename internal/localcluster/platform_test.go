package localcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDecidePlatform(t *testing.T) {
	ok := func() kvmProbe { return kvmProbe{Took: 180 * time.Millisecond} }
	hung := func() kvmProbe { return kvmProbe{Err: errors.New("did not finish within 10s (hung)")} }
	noDevice := errors.New("open /dev/kvm: no such file or directory")
	for _, tc := range []struct {
		name      string
		requested string
		deviceErr error
		probe     func() kvmProbe // nil: must not be called
		want      string          // platform; "" means an error
		reason    string          // substring of the reason (or of the error)
	}{
		{"systrap requested, no probe", PlatformSystrap, nil, nil, PlatformSystrap, "requested"},
		{"systrap requested even without KVM", PlatformSystrap, noDevice, nil, PlatformSystrap, "requested"},
		{"auto, kvm works", PlatformAuto, nil, ok, PlatformKVM, "passed in 180ms"},
		{"auto, kvm hangs: fallback", PlatformAuto, nil, hung, PlatformSystrap, "fallback: kvm smoke test failed: did not finish"},
		{"auto, no device: fallback without probing", PlatformAuto, noDevice, nil, PlatformSystrap, "fallback: KVM unusable: open /dev/kvm"},
		{"kvm requested and works", PlatformKVM, nil, ok, PlatformKVM, "requested; kvm smoke test passed"},
		{"kvm requested but hangs: error, not a silent systrap", PlatformKVM, nil, hung, "", "smoke test failed"},
		{"kvm requested without device: error", PlatformKVM, noDevice, nil, "", "KVM is unusable"},
		{"unknown platform: error", "ptrace", nil, nil, "", `unknown gVisor platform "ptrace"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := tc.probe
			if probe == nil {
				probe = func() kvmProbe { t.Fatal("probe called"); return kvmProbe{} }
			}
			pc, err := decidePlatform(tc.requested, tc.deviceErr, probe)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("want an error containing %q, got %v (choice %+v)", tc.reason, err, pc)
				}
				var ue *Error
				if !errors.As(err, &ue) || ue.Fix == "" {
					t.Fatalf("error %v carries no fix for the user", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pc.Platform != tc.want || !strings.Contains(pc.Reason, tc.reason) || pc.Requested != tc.requested {
				t.Fatalf("got %+v, want platform %s with reason containing %q", pc, tc.want, tc.reason)
			}
		})
	}
}

// fakeRunsc writes a script standing in for runsc: the probe's timeout and
// cleanup are what is under test, not gVisor (the e2e test runs the real one).
func fakeRunsc(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// A zombie has exited; only its parent's wait is missing.
	f := strings.Fields(string(data))
	return len(f) > 2 && f[2] != "Z"
}

// TestProbeRunscHangIsKilled is the kvm hang of nested VMs: runsc and the
// process it started never finish. The probe must return by its timeout
// and leave no process behind.
func TestProbeRunscHangIsKilled(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	runsc := fakeRunsc(t, `echo $$ > `+pids+`; sleep 600 & echo $! >> `+pids+`; wait`)
	start := time.Now()
	r := probeRunsc(context.Background(), runsc, PlatformKVM, defaultKVMDevice, 300*time.Millisecond)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "did not finish within 300ms (hung)") {
		t.Fatalf("want a hang error, got %+v", r)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the probe took %s despite its 300ms timeout", took)
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	var left []int
	deadline := time.Now().Add(5 * time.Second)
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the process's state
		}
		if alive(pid) {
			left = append(left, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(left) > 0 {
		t.Fatalf("processes left behind by the probe: %v", left)
	}
}

func TestProbeRunscFailureIsReported(t *testing.T) {
	runsc := fakeRunsc(t, `echo "creating container: cannot open /dev/kvm" >&2; exit 3`)
	r := probeRunsc(context.Background(), runsc, PlatformKVM, defaultKVMDevice, 5*time.Second)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "exit status 3") || !strings.Contains(r.Err.Error(), "cannot open /dev/kvm") {
		t.Fatalf("want the exit status and runsc's message, got %+v", r)
	}
}

func TestProbeRunscArguments(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	runsc := fakeRunsc(t, `echo "$@" TMPDIR=$TMPDIR > `+args+`; mkdir $TMPDIR/runsc-do1; touch $TMPDIR/runsc-do1/x`)
	if r := probeRunsc(context.Background(), runsc, PlatformKVM, "/dev/kvm-other", 5*time.Second); r.Err != nil {
		t.Fatal(r.Err)
	}
	data, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	got := string(data)
	// A root of its own: the probe must never see the cluster's containers.
	for _, want := range []string{"--root=" + os.TempDir(), "--network=none", "--platform=kvm", "--platform_device_path=/dev/kvm-other", "do /bin/true"} {
		if !strings.Contains(got, want) {
			t.Fatalf("runsc args %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "/run/agent-sandbox/runsc") {
		t.Fatalf("the probe used the cluster's runsc root: %q", got)
	}
	// runsc do's own temp dir lands in the probe's root, which is gone.
	_, tmp, ok := strings.Cut(strings.TrimSpace(got), "TMPDIR=")
	if !ok || !strings.HasPrefix(tmp, filepath.Join(os.TempDir(), "agent-sandbox-platform-probe-")) {
		t.Fatalf("TMPDIR %q is not the probe's root", tmp)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("probe root %s left behind: %v", tmp, err)
	}
}

// TestRunscConfigPlatform: systrap keeps the exact runsc.toml of before
// (a changed file restarts containerd on every node that runs `up`), kvm
// names its platform, and a non-default device reaches runsc.
func TestRunscConfigPlatform(t *testing.T) {
	cfg := DefaultConfig()
	c := New(cfg, nil)
	c.bins.Runsc = "/cache/runsc"
	const systrap = `binary_name = "/cache/runsc"
root = "/run/agent-sandbox/runsc"

[runsc_config]
  platform = "systrap"
  # Deep hibernation restores a checkpoint into a new Pod, whose spec
  # differs by design (pod UID in the cgroup parent and volume paths); gVisor
  # would refuse the restore under its default "enforce".
  restore-spec-validation = "warning"
`
	if got := c.runscConfig(); got != systrap {
		t.Fatalf("runsc.toml before a choice:\n%s\nwant:\n%s", got, systrap)
	}
	c.platform = PlatformChoice{Platform: PlatformSystrap}
	if got := c.runscConfig(); got != systrap {
		t.Fatalf("runsc.toml for systrap:\n%s\nwant:\n%s", got, systrap)
	}
	c.platform = PlatformChoice{Platform: PlatformKVM}
	if got, want := c.runscConfig(), strings.Replace(systrap, `"systrap"`, `"kvm"`, 1); got != want {
		t.Fatalf("runsc.toml for kvm:\n%s\nwant:\n%s", got, want)
	}
	c.cfg.KVMDevice = "/dev/kvm-other"
	if got := c.runscConfig(); !strings.Contains(got, "  platform = \"kvm\"\n  platform_device_path = \"/dev/kvm-other\"\n") {
		t.Fatalf("runsc.toml lacks the device:\n%s", got)
	}
}

// TestChoosePlatformRecordsAndReuses: the choice is written where `status`
// reads it, and a second Up with the same inputs reuses it instead of
// paying for another probe; a changed request decides again.
func TestChoosePlatformRecordsAndReuses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RunDir = t.TempDir()
	cfg.StateDir = t.TempDir()
	cfg.KVMDevice = filepath.Join(t.TempDir(), "no-kvm") // the forced fallback
	cfg.GVisorPlatform = PlatformAuto
	c := New(cfg, nil)
	c.bins.Runsc = fakeRunsc(t, `echo "probe must not run without a device" >&2; exit 1`)
	pc, err := c.choosePlatform(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if pc.Platform != PlatformSystrap || !strings.Contains(pc.Reason, "KVM unusable: open "+cfg.KVMDevice) {
		t.Fatalf("got %+v", pc)
	}
	rec, err := cfg.ReadPlatformChoice()
	if err != nil || rec == nil || *rec != pc {
		t.Fatalf("record %+v (err %v), want %+v", rec, err, pc)
	}
	// Mark the record: a reuse returns the mark, a new decision does not.
	rec.Reason = "from the record"
	data := []byte(`{"platform":"systrap","reason":"from the record","requested":"auto","key":"` + rec.Key + `"}`)
	if err := os.WriteFile(cfg.platformRecord(), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if pc, err := c.choosePlatform(context.Background()); err != nil || pc.Reason != "from the record" {
		t.Fatalf("same inputs: got %+v, %v; want the recorded choice", pc, err)
	}
	c.cfg.GVisorPlatform = PlatformSystrap
	if pc, err := c.choosePlatform(context.Background()); err != nil || pc.Reason != "requested" {
		t.Fatalf("changed request: got %+v, %v; want a new decision", pc, err)
	}
	c.cfg.GVisorPlatform = PlatformKVM
	if _, err := c.choosePlatform(context.Background()); err == nil {
		t.Fatal("kvm requested without a device: want an error")
	}
}

// TestPlatformChoiceOutlivesDown: `down` removes RunDir, so the choice is
// also kept under StateDir (0600) and the next Up reuses it, writing the
// record `status` reads again, instead of probing anew; `down --purge`
// (StateDir gone) decides again, and a StateDir Up has not made is never
// created here.
func TestPlatformChoiceOutlivesDown(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RunDir = filepath.Join(t.TempDir(), "run")
	cfg.StateDir = t.TempDir()
	cfg.KVMDevice = filepath.Join(t.TempDir(), "no-kvm")
	cfg.GVisorPlatform = PlatformAuto
	c := New(cfg, nil)
	c.bins.Runsc = fakeRunsc(t, `echo "probe must not run without a device" >&2; exit 1`)
	first, err := c.choosePlatform(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(cfg.platformMemo())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("memo under StateDir: %v, mode %v; want 0600", err, st)
	}
	// downLeaving is `down` (RunDir removed) with the memo replaced, so a
	// reuse is told apart from a new decision.
	downLeaving := func(memo string) {
		t.Helper()
		if err := os.RemoveAll(cfg.RunDir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg.platformMemo(), []byte(memo), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	downLeaving(`{"platform":"systrap","reason":"from the memo","requested":"auto","key":"` + first.Key + `"}`)
	if pc, err := c.choosePlatform(context.Background()); err != nil || pc.Reason != "from the memo" {
		t.Fatalf("after down: got %+v, %v; want the kept choice", pc, err)
	}
	if rec, err := cfg.ReadPlatformChoice(); err != nil || rec == nil || rec.Reason != "from the memo" {
		t.Fatalf("status record after reuse: %+v, %v", rec, err)
	}
	// A memo with another key (another boot, runsc or request) is not reused.
	downLeaving(`{"platform":"kvm","reason":"from another boot","requested":"auto","key":"0000000000000000"}`)
	if pc, err := c.choosePlatform(context.Background()); err != nil || pc.Platform != PlatformSystrap || pc.Reason == "from another boot" {
		t.Fatalf("stale memo: got %+v, %v; want a new decision", pc, err)
	}
	// `down --purge`: no StateDir; the decision is made and not memoised.
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.choosePlatform(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("StateDir after a decision without it: %v; want it left absent", err)
	}
}

func TestReadPlatformChoiceBadRecord(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RunDir = t.TempDir()
	if pc, err := cfg.ReadPlatformChoice(); pc != nil || err != nil {
		t.Fatalf("no record: got %+v, %v", pc, err)
	}
	if err := os.WriteFile(cfg.platformRecord(), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.ReadPlatformChoice(); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("corrupt record: want a decode error, got %v", err)
	}
}

// A killed `runsc do` leaves its sandbox's cgroups (runsc-<n> at the top of
// every hierarchy); the probe removes the ones that appeared while it ran,
// and only those.
func TestProbeRunscRemovesItsCgroups(t *testing.T) {
	fs := t.TempDir()
	old := filepath.Join(fs, "cpu", "runsc-111111")
	other := filepath.Join(fs, "cpu", "kubepods")
	for _, d := range []string{old, other, filepath.Join(fs, "memory")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	orig := cgroupFS
	cgroupFS = fs
	defer func() { cgroupFS = orig }()
	busy := filepath.Join(fs, "memory", "runsc-222222")
	runsc := fakeRunsc(t, `mkdir `+fs+`/cpu/runsc-222222 `+fs+`/runsc-222222 `+busy+` && touch `+busy+`/tasks; sleep 600`)
	r := probeRunsc(context.Background(), runsc, PlatformKVM, defaultKVMDevice, 300*time.Millisecond)
	if r.Err == nil {
		t.Fatalf("want a hang error, got %+v", r)
	}
	for _, gone := range []string{filepath.Join(fs, "cpu", "runsc-222222"), filepath.Join(fs, "runsc-222222")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("the probe's cgroup %s is left behind (stat: %v)", gone, err)
		}
	}
	for _, kept := range []string{old, other, busy} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s must stay (older than the probe, not runsc's, or still holding tasks): %v", kept, err)
		}
	}
}

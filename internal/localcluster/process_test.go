package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDetachedProcessLifecycle(t *testing.T) {
	cfg := testConfig(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary") // coreutils is always present on the target machines
	}
	spec := procSpec{name: "sleeper", binary: sleep, args: []string{"60"}}
	r, err := cfg.startDetached(spec)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cfg.readRecord("sleeper")
	if err != nil || rec == nil {
		t.Fatalf("readRecord: %v %v", rec, err)
	}
	if !rec.alive() || rec.PID != r.rec.PID || rec.Hash != spec.hash() {
		t.Fatalf("record %+v does not describe the running process", rec)
	}
	// A recycled pid (different start time) is not our process.
	fake := *rec
	fake.StartTime++
	if fake.alive() {
		t.Error("a record with another start time counts as alive")
	}
	if (procSpec{name: "sleeper", binary: sleep, args: []string{"61"}}).hash() == spec.hash() {
		t.Error("different flags give the same hash")
	}
	stopProcess(rec, 5*time.Second)
	if rec.alive() {
		t.Fatal("process still alive after stopProcess")
	}
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("exit not observed")
	}
}

// A descriptor inherited without close-on-exec must not reach a component.
func TestStartDetachedDoesNotLeakInheritedDescriptors(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Simulate flock(1): clear close-on-exec, as an inherited fd has it.
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_SETFD, 0); errno != 0 {
		t.Fatal(errno)
	}
	cfg := DefaultConfig()
	cfg.StateDir, cfg.RunDir = t.TempDir(), t.TempDir()
	r, err := cfg.startDetached(procSpec{name: "fdcheck", binary: "/bin/sh",
		args: []string{"-c", fmt.Sprintf("ls -l /proc/self/fd/ | grep -c %q || true", f.Name())}})
	if err != nil {
		t.Fatal(err)
	}
	<-r.exited
	out, _ := os.ReadFile(cfg.logFile("fdcheck"))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if last := lines[len(lines)-1]; last != "0" {
		t.Errorf("the child holds the inherited descriptor (%s matches):\n%s", last, out)
	}
}

// followRecord reports the end of a process it did not start, and stays
// quiet while the process runs.
func TestFollowRecordSeesTheProcessEnd(t *testing.T) {
	cfg := testConfig(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary") // coreutils is always present on the target machines
	}
	if _, err := cfg.startDetached(procSpec{name: "stopping", binary: sleep, args: []string{"60"}}); err != nil {
		t.Fatal(err)
	}
	rec, err := cfg.readRecord("stopping")
	if err != nil || rec == nil {
		t.Fatalf("readRecord: %v %v", rec, err)
	}
	r, stop := followRecord(rec)
	defer stop()
	select {
	case <-r.exited:
		t.Fatal("a running process was reported ended")
	case <-time.After(300 * time.Millisecond): // three polls
	}
	if err := syscall.Kill(rec.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the process was not observed")
	}
	if !errors.Is(r.err, errEndedBeforeAnswering) {
		t.Fatalf("err = %v", r.err)
	}
	stop() // idempotent
}

package localcluster

import (
	"os/exec"
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

package router

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestIdleSuspender(t *testing.T) {
	idx := NewIndex()
	ctl := &fakeControl{idx: idx}
	tr := NewIdleTracker()
	now := time.Unix(1_000_000, 0)
	tr.now = func() time.Time { return now }
	s := &IdleSuspender{Tracker: tr, Resolver: idx, Lookup: idx, Control: ctl,
		Metrics: NewMetrics(BuildInfo{}), IdleAfter: time.Minute, Log: logr.Discard(),
		now: func() time.Time { return now }}

	idx.UpsertSandbox(&SandboxRecord{Key: key("busy"), UID: "ub", Ready: true, ResourceVersion: "1"})
	idx.UpsertSandbox(&SandboxRecord{Key: key("quiet"), UID: "uq", Ready: true, ResourceVersion: "1"})
	idx.UpsertSandbox(&SandboxRecord{Key: key("never-routed"), UID: "un", Ready: true, ResourceVersion: "1"})

	doneQuiet := tr.Begin(key("quiet"))
	doneQuiet()
	doneBusy := tr.Begin(key("busy")) // a long stream stays open

	now = now.Add(2 * time.Minute)
	s.Tick(context.Background())
	ctl.mu.Lock()
	patches := append([]string(nil), ctl.patches...)
	ctl.mu.Unlock()
	if len(patches) != 1 || patches[0] != "default/quiet=Suspended" {
		t.Fatalf("patches %v: only the idle, router-reached sandbox is suspended", patches)
	}
	doneBusy()

	// Another replica's activity (annotation) keeps a sandbox awake.
	idx.UpsertSandbox(&SandboxRecord{Key: key("remote"), UID: "ur", Ready: true, LastActivity: now.Add(-10 * time.Second)})
	now = now.Add(30 * time.Second)
	s.Tick(context.Background())
	ctl.mu.Lock()
	for _, p := range ctl.patches {
		if p == "default/remote=Suspended" {
			t.Fatal("remote activity ignored")
		}
	}
	ctl.mu.Unlock()
	now = now.Add(2 * time.Minute)
	s.Tick(context.Background())
	found := false
	ctl.mu.Lock()
	for _, p := range ctl.patches {
		found = found || p == "default/remote=Suspended"
	}
	ctl.mu.Unlock()
	if !found {
		t.Fatal("idle sandbox known only from the annotation was not suspended")
	}

	// A freshly resumed sandbox (Ready just now) is not suspended at once.
	idx.UpsertSandbox(&SandboxRecord{Key: key("fresh"), UID: "uf", Ready: true, ReadySince: now})
	tr.Begin(key("fresh"))()
	a, _ := tr.m.Load(key("fresh"))
	a.(*activity).last.Store(now.Add(-time.Hour).UnixNano())
	s.Tick(context.Background())
	ctl.mu.Lock()
	for _, p := range ctl.patches {
		if p == "default/fresh=Suspended" {
			t.Fatal("freshly ready sandbox suspended")
		}
	}
	ctl.mu.Unlock()
}

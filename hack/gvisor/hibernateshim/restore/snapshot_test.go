package restore

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeSnapshot(t *testing.T, s Store, ns, id string, m Meta, files map[string]int) {
	t.Helper()
	dir, err := s.SnapshotDir(ns, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m.Files = map[string]int64{}
	for name, n := range files {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		m.Files[name] = int64(n)
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, metaFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func anns(kind, ns, uid, snap string) map[string]string {
	return map[string]string{annoContainerType: kind, annoSandboxNS: ns, annoSandboxUID: uid, AnnotationSnapshot: snap}
}

func TestDecide(t *testing.T) {
	s := Store{Root: t.TempDir()}
	writeSnapshot(t, s, "team-a", "sb1", Meta{Namespace: "team-a", RuntimeHash: "h1"}, map[string]int{"checkpoint.img": 10, "pages_meta.img": 3})

	// Whole Pod restored: the pause decides, the app container follows.
	d, err := s.Decide(anns("sandbox", "team-a", "pod1", "sb1"), "h1")
	if err != nil || !d.Restore {
		t.Fatalf("pause: %+v %v", d, err)
	}
	if d, _ := s.Decide(anns("container", "team-a", "pod1", "sb1"), "h1"); !d.Restore {
		t.Fatalf("app container must follow the pause's decision")
	}
	// A second pod sandbox for the same Pod never retries the restore.
	if d, _ := s.Decide(anns("sandbox", "team-a", "pod1", "sb1"), "h1"); d.Restore {
		t.Fatal("restore retried for a recreated pod sandbox")
	}
	if r, _ := s.ReadResult("pod1"); r.State != StateFallback || !strings.Contains(r.Reason, "already attempted") {
		t.Fatalf("result %+v", r)
	}
	if d, _ := s.Decide(anns("container", "team-a", "pod1", "sb1"), "h1"); d.Restore {
		t.Fatal("app container restored after the pod fell back")
	}

	for name, tc := range map[string]struct {
		a    map[string]string
		hash string
		want string
	}{
		"other namespace's snapshot": {anns("sandbox", "team-b", "pod2", "sb1"), "h1", "missing"},
		"path escape":                {anns("sandbox", "team-a", "pod3", "../team-b/sb1"), "h1", "invalid snapshot reference"},
		"other runtime":              {anns("sandbox", "team-a", "pod4", "sb1"), "h2", "another runtime version"},
	} {
		d, err := s.Decide(tc.a, tc.hash)
		if err != nil || d.Restore {
			t.Fatalf("%s: %+v %v", name, d, err)
		}
		r, _ := s.ReadResult(tc.a[annoSandboxUID])
		if r.State != StateFallback || !strings.Contains(r.Reason, tc.want) {
			t.Errorf("%s: result %+v, want Fallback %q", name, r, tc.want)
		}
	}

	// Truncated image and copied metadata are refused.
	dir, _ := s.SnapshotDir("team-a", "sb1")
	if err := os.Truncate(filepath.Join(dir, "checkpoint.img"), 4); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Validate("team-a", "sb1", "h1"); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated: %v", err)
	}
	writeSnapshot(t, s, "team-b", "copied", Meta{Namespace: "team-a"}, map[string]int{"pages.img": 1})
	if _, err := s.Validate("team-b", "copied", ""); err == nil || !strings.Contains(err.Error(), "belongs to namespace") {
		t.Fatalf("copied: %v", err)
	}
	// No annotation: stock behaviour.
	if d, err := s.Decide(map[string]string{annoContainerType: "sandbox"}, "h1"); err != nil || d.Restore {
		t.Fatalf("no annotation: %+v %v", d, err)
	}
}

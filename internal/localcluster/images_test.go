package localcluster

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

func TestTarballRefs(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.tar")
	if _, err := images.WriteTarball(images.Spec{Ref: PauseImage, Files: []images.File{{Path: "/x", Content: []byte("x")}}}, p); err != nil {
		t.Fatal(err)
	}
	refs, err := tarballRefs(p)
	if err != nil || len(refs) != 1 || refs[0] != PauseImage {
		t.Errorf("tarballRefs = %v, %v", refs, err)
	}
	if got := normalizeRefs([]string{"busybox:1"}); got[0] != "docker.io/library/busybox:1" {
		t.Errorf("normalizeRefs = %v", got)
	}
	if _, err := tarballRefs(filepath.Join(dir, "missing.tar")); err == nil {
		t.Error("missing tarball accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.tar"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tarballRefs(filepath.Join(dir, "empty.tar")); err == nil {
		t.Error("an archive without manifest was accepted")
	}
}

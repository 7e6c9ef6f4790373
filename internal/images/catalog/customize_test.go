package catalog

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

func TestCustomizedKeyFollowsInputs(t *testing.T) {
	base := Customized{Name: "x", Base: MinimalRootfs, Script: "true", Inputs: map[string][]byte{"/tmp/a": []byte("1")}}
	same := Customized{Name: "x", Base: MinimalRootfs, Script: "true", Inputs: map[string][]byte{"/tmp/a": []byte("1")}}
	if base.key() != same.key() || len(base.key()) != 12 {
		t.Fatalf("equal inputs, keys %q and %q", base.key(), same.key())
	}
	changed := map[string]Customized{
		"script": {Name: "x", Base: MinimalRootfs, Script: "false", Inputs: base.Inputs},
		"input":  {Name: "x", Base: MinimalRootfs, Script: "true", Inputs: map[string][]byte{"/tmp/a": []byte("2")}},
		"path":   {Name: "x", Base: MinimalRootfs, Script: "true", Inputs: map[string][]byte{"/tmp/b": []byte("1")}},
		"base":   {Name: "x", Base: PythonRootfs, Script: "true", Inputs: base.Inputs},
	}
	for what, c := range changed {
		if c.key() == base.key() {
			t.Errorf("changing the %s keeps key %s", what, c.key())
		}
	}
	if got, want := base.Dir("/c"), "/c/rootfs/x-"+base.key(); got != want {
		t.Errorf("Dir = %s, want %s", got, want)
	}
}

func TestRemoveOlderKeepsOtherImages(t *testing.T) {
	cache := t.TempDir()
	root := filepath.Join(cache, "rootfs")
	for _, d := range []string{"chrome-aaaaaaaaaaaa", "chrome-bbbbbbbbbbbb", "chrome-extra-cccccccccccc", "jupyterlab-aaaaaaaaaaaa", "debian-bookworm-minbase"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d+".ok"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removeOlder(cache, "chrome", filepath.Join(root, "chrome-bbbbbbbbbbbb"))
	for d, want := range map[string]bool{
		"chrome-aaaaaaaaaaaa": false, "chrome-bbbbbbbbbbbb": true, "chrome-extra-cccccccccccc": true,
		"jupyterlab-aaaaaaaaaaaa": true, "debian-bookworm-minbase": true,
	} {
		_, err := os.Stat(filepath.Join(root, d))
		_, errOK := os.Stat(filepath.Join(root, d+".ok"))
		if (err == nil) != want || (errOK == nil) != want {
			t.Errorf("%s: exists=%v marker=%v, want %v", d, err == nil, errOK == nil, want)
		}
	}
}

// An archive is written once and left alone until an input changes.
func TestWriteArchiveSkipsUnchangedInputs(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "hello")
	if err := os.WriteFile(src, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := images.Spec{Ref: "localhost/test/stamp:v1", Files: []images.File{{Path: "/hello", Source: src}}, Entrypoint: []string{"/hello"}}
	out := filepath.Join(dir, "out", "stamp.tar")
	first, err := writeArchive(spec, out)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1000, 0)
	if err := os.Chtimes(out, old, old); err != nil {
		t.Fatal(err)
	}
	again, err := writeArchive(spec, out)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(out); again != first || !fi.ModTime().Equal(old) {
		t.Fatalf("unchanged inputs rewrote the archive (digest %v, was %v; mtime %v)", again, first, fi.ModTime())
	}
	for what, change := range map[string]func(){
		"host file": func() { _ = os.WriteFile(src, []byte("hello again\n"), 0o644) },
		"config":    func() { spec.Env = []string{"A=1"} },
		"archive":   func() { _ = os.Remove(out) },
	} {
		change()
		d, err := writeArchive(spec, out)
		if err != nil {
			t.Fatal(err)
		}
		info, err := images.Inspect(out)
		if err != nil {
			t.Fatalf("after changing the %s: %v", what, err)
		}
		if info.Digest != d {
			t.Errorf("after changing the %s: archive has %v, writeArchive returned %v", what, info.Digest, d)
		}
		if what != "archive" && d == first {
			t.Errorf("after changing the %s: digest unchanged", what)
		}
		first = d
	}
}

package main

import (
	"context"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// TestPushIndexKeepsDigests pushes two archives as one index to an
// in-process OCI registry and reads it back: one entry per platform, each
// the manifest digest the archive was built with.
func TestPushIndexKeepsDigests(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	dir := t.TempDir()
	var want = map[string]string{}
	var archives []archive
	for _, arch := range []string{"amd64", "arm64"} {
		path := filepath.Join(dir, arch+".tar")
		d, err := images.WriteTarball(images.Spec{
			Ref:          "localhost/agent-sandbox/test:dev",
			Files:        []images.File{{Path: "/hello", Content: []byte("hello " + arch)}},
			Entrypoint:   []string{"/hello"},
			Architecture: arch,
		}, path)
		if err != nil {
			t.Fatal(err)
		}
		want[arch] = d.String()
		archives = append(archives, archive{path: path, arch: arch})
	}
	ref := u.Host + "/agents/" + RemoteName("controller") + ":v1"
	digest, err := pushIndex(context.Background(), ref, archives, true)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := name.ParseReference(ref, name.Insecure)
	desc, err := remote.Get(r)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != digest {
		t.Errorf("registry has %s at %s, push reported %s", desc.Digest, ref, digest)
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(m.Manifests))
	}
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" || want[d.Platform.Architecture] != d.Digest.String() {
			t.Errorf("index entry %v %s; built %v", d.Platform, d.Digest, want)
		}
	}
}

func TestCheckPushPrefix(t *testing.T) {
	for _, ok := range []string{"registry.example.com/agents", "10.0.0.5:5000/agent-sandbox", "localhost:5000/a/b/"} {
		if err := checkPushPrefix(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "http://registry.example.com/x", "Registry Example", "host/UPPER"} {
		if err := checkPushPrefix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

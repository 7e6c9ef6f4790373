package install

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReleaseManifestsRegistry: REGISTRY and TAG (what `make push` pushes
// to) name the reference's image names under that prefix; with neither, the
// manifests name the reference's release path with IfNotPresent.
func TestReleaseManifestsRegistry(t *testing.T) {
	for _, tc := range []struct {
		name, controller, router string
		env                      []string
	}{
		{"registry", "10.1.2.3:5000/agents/agent-sandbox-controller:v0.9.1", "10.1.2.3:5000/agents/sandbox-router-go:v0.9.1",
			[]string{"REGISTRY=10.1.2.3:5000/agents/", "TAG=v0.9.1"}},
		{"defaults", "registry.k8s.io/agent-sandbox/agent-sandbox-controller:dev", "registry.k8s.io/agent-sandbox/sandbox-router-go:dev", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			env := append([]string{"OUT_DIR=" + out, "KUBECTL=" + kubectlBin(t), "IMAGE_REPO=", "IMAGE_TAG="}, tc.env...)
			mustRun(t, env, repo("hack", "release-manifests.sh"))
			b, err := os.ReadFile(filepath.Join(out, "sandbox-with-extensions.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			objs := decode(t, b)
			for d, want := range map[string]string{"agent-sandbox-controller": tc.controller, "sandbox-router": tc.router} {
				c := container(t, get(t, objs, "Deployment/"+Namespace+"/"+d))
				if c["image"] != want || c["imagePullPolicy"] != "IfNotPresent" {
					t.Errorf("%s runs %v (%v), want %s (IfNotPresent)", d, c["image"], c["imagePullPolicy"], want)
				}
			}
		})
	}
}

// TestLocalClusterManifestNamesLocalImages: the manifest the local cluster
// installs (internal/platform/manifests, from make generate) names the
// images mkimages imports into it, not a registry's.
func TestLocalClusterManifestNamesLocalImages(t *testing.T) {
	b, err := os.ReadFile(repo("internal", "platform", "manifests", "sandbox-with-extensions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, b)
	for d, want := range map[string]string{"agent-sandbox-controller": "localhost/agent-sandbox/controller:dev", "sandbox-router": "localhost/agent-sandbox/router:dev"} {
		if c := container(t, get(t, objs, "Deployment/"+Namespace+"/"+d)); c["image"] != want {
			t.Errorf("%s runs %v, want %s", d, c["image"], want)
		}
	}
}

package platform

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// deploymentStamps decodes a manifest and returns each Deployment's stamp
// ("" when it has none).
func deploymentStamps(t *testing.T, manifest []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			break
		}
		if d.Kind == "Deployment" {
			out[d.Name] = d.Spec.Template.Annotations[ImageStampAnnotation]
		}
	}
	return out
}

// A rebuilt image changes the pod template of the Deployment that runs it,
// and only that one, so `up` after `make images` rolls exactly what changed.
func TestImageStampsRollRebuiltImages(t *testing.T) {
	cache := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(cache, "images"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cache, "images", name+".tar"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := imageStamps(cache); err == nil {
		t.Fatal("no tarballs: want an error")
	}
	write("controller", "controller v1")
	write("router", "router v1")
	render := func() map[string]string {
		t.Helper()
		stamps, err := imageStamps(cache)
		if err != nil {
			t.Fatal(err)
		}
		m, err := localPlatformManifest(stamps)
		if err != nil {
			t.Fatal(err)
		}
		return deploymentStamps(t, m)
	}
	first := render()
	for deploy := range stampedDeployments {
		if len(first[deploy]) != 16 {
			t.Errorf("%s: stamp %q, want 16 hex digits", deploy, first[deploy])
		}
	}
	if again := render(); again[controllerDeployment] != first[controllerDeployment] || again["sandbox-router"] != first["sandbox-router"] {
		t.Errorf("same images, different stamps: %v then %v", first, again)
	}
	write("controller", "controller v2")
	second := render()
	if second[controllerDeployment] == first[controllerDeployment] {
		t.Error("rebuilt controller image: the controller's pod template did not change")
	}
	if second["sandbox-router"] != first["sandbox-router"] {
		t.Error("unchanged router image: the router's pod template changed")
	}
	// Outside the local cluster (install on any cluster) nothing is stamped.
	plain, err := LocalPlatformManifest()
	if err != nil {
		t.Fatal(err)
	}
	for deploy, stamp := range deploymentStamps(t, plain) {
		if stamp != "" {
			t.Errorf("%s stamped without a local image: %q", deploy, stamp)
		}
	}
}

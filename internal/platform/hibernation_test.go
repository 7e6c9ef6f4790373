package platform

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The local cluster's controller runs with deep hibernation on, and the
// rest of the release manifest is applied unchanged.
func TestLocalPlatformManifestEnablesDeepHibernation(t *testing.T) {
	orig, err := Manifest(ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	local, err := LocalPlatformManifest()
	if err != nil {
		t.Fatal(err)
	}
	count := func(b []byte) (n int, args map[string][]string) {
		args = map[string][]string{}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var d appsv1.Deployment
			if err := dec.Decode(&d); err != nil {
				break
			}
			if d.Kind == "" {
				continue
			}
			n++
			if d.Kind == "Deployment" {
				args[d.Name] = d.Spec.Template.Spec.Containers[0].Args
			}
		}
		return n, args
	}
	n0, a0 := count(orig)
	n1, a1 := count(local)
	if n0 < 10 || n0 != n1 {
		t.Fatalf("objects: release %d, local %d", n0, n1)
	}
	ctl := strings.Join(a1[controllerDeployment], " ")
	for _, f := range LocalControllerFlags {
		if !strings.Contains(ctl, f) {
			t.Errorf("controller args %q lack %s", ctl, f)
		}
	}
	if got, want := len(a1[controllerDeployment]), len(a0[controllerDeployment])+len(LocalControllerFlags); got != want {
		t.Errorf("controller has %d args, want %d", got, want)
	}
	if strings.Join(a0["sandbox-router"], " ") != strings.Join(a1["sandbox-router"], " ") {
		t.Errorf("router args changed: %v -> %v", a0["sandbox-router"], a1["sandbox-router"])
	}
	// Applying twice (flags present already) adds nothing.
	again, err := withControllerFlags(local, LocalControllerFlags)
	if err != nil {
		t.Fatal(err)
	}
	if _, a2 := count(again); len(a2[controllerDeployment]) != len(a1[controllerDeployment]) {
		t.Errorf("flags added twice: %v", a2[controllerDeployment])
	}
	policy, err := manifests.ReadFile("manifests/" + HibernationManifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kind: ValidatingAdmissionPolicy\n", "kind: ValidatingAdmissionPolicyBinding\n", "policyName: agent-sandbox-hibernation"} {
		if !bytes.Contains(policy, []byte(k)) {
			t.Errorf("%s lacks %q", HibernationManifest, k)
		}
	}
}

package install

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The objects of each install variant, as Kind/namespace/name.
var (
	coreObjects = []string{
		"ClusterRole//agent-sandbox-controller",
		"ClusterRole//agent-sandbox-router",
		"ClusterRoleBinding//agent-sandbox-controller",
		"ClusterRoleBinding//agent-sandbox-router",
		"CustomResourceDefinition//sandboxes.agents.x-k8s.io",
		"Deployment/agent-sandbox-system/agent-sandbox-controller",
		"Deployment/agent-sandbox-system/sandbox-router",
		"Namespace//agent-sandbox-system",
		"PodDisruptionBudget/agent-sandbox-system/sandbox-router",
		"Role/agent-sandbox-system/agent-sandbox-controller",
		"Role/agent-sandbox-system/agent-sandbox-controller-leader-election",
		"RoleBinding/agent-sandbox-system/agent-sandbox-controller",
		"RoleBinding/agent-sandbox-system/agent-sandbox-controller-leader-election",
		"Service/agent-sandbox-system/agent-sandbox-controller",
		"Service/agent-sandbox-system/agent-sandbox-webhook-service",
		"Service/agent-sandbox-system/sandbox-router-metrics",
		"Service/agent-sandbox-system/sandbox-router-svc",
		"ServiceAccount/agent-sandbox-system/agent-sandbox-controller",
		"ServiceAccount/agent-sandbox-system/sandbox-router",
		"ValidatingAdmissionPolicy//agent-sandbox-pod-security",
		"ValidatingAdmissionPolicyBinding//agent-sandbox-pod-security",
	}
	extensionObjects = []string{
		"ClusterRole//agent-sandbox-controller-extensions",
		"ClusterRoleBinding//agent-sandbox-controller-extensions",
		"CustomResourceDefinition//sandboxclaims.extensions.agents.x-k8s.io",
		"CustomResourceDefinition//sandboxtemplates.extensions.agents.x-k8s.io",
		"CustomResourceDefinition//sandboxwarmpools.extensions.agents.x-k8s.io",
		"Deployment/agent-sandbox-system/agent-sandbox-controller",
		"Role/agent-sandbox-system/agent-sandbox-controller-late-binding",
		"RoleBinding/agent-sandbox-system/agent-sandbox-controller-late-binding",
	}
)

func sorted(a ...[]string) []string {
	var out []string
	for _, s := range a {
		out = append(out, s...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func controllerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	c := container(t, get(t, objs, "Deployment/agent-sandbox-system/agent-sandbox-controller"))
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	return args
}

// container returns the first container of a Deployment.
func container(t *testing.T, d *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%s has %d containers, want 1", key(d), len(cs))
	}
	return cs[0].(map[string]any)
}

func TestKustomizeBase(t *testing.T) {
	objs := decode(t, []byte(mustRun(t, nil, kubectlBin(t), "kustomize", repo("k8s"))))
	if got, want := keys(objs), sorted(coreObjects, extensionObjects); !reflect.DeepEqual(got, want) {
		t.Fatalf("k8s/ renders\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkInstall(t, objs, true)
}

func TestKustomizeCoreOnly(t *testing.T) {
	objs := decode(t, kustomizeVariant(t, "core-only"))
	if got := keys(objs); !reflect.DeepEqual(got, coreObjects) {
		t.Fatalf("core-only renders\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(coreObjects, "\n"))
	}
	checkInstall(t, objs, false)
}

func TestKustomizeExtensionsOnly(t *testing.T) {
	objs := decode(t, kustomizeVariant(t, "extensions-only"))
	if got := keys(objs); !reflect.DeepEqual(got, extensionObjects) {
		t.Fatalf("extensions-only renders\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(extensionObjects, "\n"))
	}
	if args := controllerArgs(t, objs); !slices.Contains(args, "--extensions") {
		t.Fatalf("controller args %v lack --extensions", args)
	}
}

// checkInstall checks what every install must get right: the names the rest
// of the project relies on, probes and ports, the non-root read-only
// containers, and CRDs converting v1alpha1 through the controller's webhook.
func checkInstall(t *testing.T, objs []*unstructured.Unstructured, extensions bool) {
	t.Helper()
	ctrl := get(t, objs, "Deployment/agent-sandbox-system/agent-sandbox-controller")
	if ctrl.GetLabels()["app"] != "agent-sandbox-controller" {
		t.Errorf("controller Deployment labels %v lack app=agent-sandbox-controller", ctrl.GetLabels())
	}
	args := controllerArgs(t, objs)
	if !slices.Contains(args, "--leader-elect=true") {
		t.Errorf("controller args %v lack --leader-elect=true", args)
	}
	// The chart passes the reference chart's --extensions=<bool>; the
	// kustomize base passes the bare flag.
	if got := slices.Contains(args, "--extensions") || slices.Contains(args, "--extensions=true"); got != extensions {
		t.Errorf("controller args %v: --extensions present = %v, want %v", args, got, extensions)
	}
	c := container(t, ctrl)
	checkLeaderIdentity(t, c, args)
	checkProbe(t, c, "livenessProbe", "/healthz", "healthz")
	checkProbe(t, c, "readinessProbe", "/readyz", "healthz")
	checkPorts(t, c, map[string]int64{"metrics": 8080, "healthz": 8081, "webhook": 9443})
	whsvc := get(t, objs, "Service/agent-sandbox-system/agent-sandbox-webhook-service")
	if ports, _, _ := unstructured.NestedSlice(whsvc.Object, "spec", "ports"); len(ports) != 1 ||
		ports[0].(map[string]any)["port"] != int64(443) || ports[0].(map[string]any)["targetPort"] != "webhook" {
		t.Errorf("webhook Service ports = %v, want 443 -> webhook", ports)
	}
	svc := get(t, objs, "Service/agent-sandbox-system/agent-sandbox-controller")
	if sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector"); sel["app"] != "agent-sandbox-controller" {
		t.Errorf("controller metrics Service selects %v", sel)
	}

	router := get(t, objs, "Deployment/agent-sandbox-system/sandbox-router")
	podLabels, _, _ := unstructured.NestedStringMap(router.Object, "spec", "template", "metadata", "labels")
	if podLabels["app"] != "sandbox-router" {
		t.Errorf("router pod labels %v lack app=sandbox-router (the template NetworkPolicy admits exactly those pods)", podLabels)
	}
	checkPorts(t, container(t, router), map[string]int64{"http": 8080, "metrics": 9090, "healthz": 8081})
	rsvc := get(t, objs, "Service/agent-sandbox-system/sandbox-router-svc")
	ports, _, _ := unstructured.NestedSlice(rsvc.Object, "spec", "ports")
	if len(ports) != 1 || ports[0].(map[string]any)["port"] != int64(8080) {
		t.Errorf("sandbox-router-svc ports = %v, want 8080", ports)
	}

	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			checkHardened(t, o)
		case "CustomResourceDefinition":
			conv, _, _ := unstructured.NestedMap(o.Object, "spec", "conversion")
			svcName, _, _ := unstructured.NestedString(conv, "webhook", "clientConfig", "service", "name")
			path, _, _ := unstructured.NestedString(conv, "webhook", "clientConfig", "service", "path")
			if conv["strategy"] != "Webhook" || svcName != "agent-sandbox-webhook-service" || path != "/convert" {
				t.Errorf("%s conversion = %v, want Webhook via agent-sandbox-webhook-service/convert", key(o), conv)
			}
		}
		if o.GetLabels()["app.kubernetes.io/part-of"] != "agent-sandbox" {
			t.Errorf("%s lacks app.kubernetes.io/part-of=agent-sandbox", key(o))
		}
	}
}

func checkProbe(t *testing.T, c map[string]any, probe, path, port string) {
	t.Helper()
	p, _, _ := unstructured.NestedString(c, probe, "httpGet", "path")
	n, _, _ := unstructured.NestedFieldNoCopy(c, probe, "httpGet", "port")
	if p != path || n != port {
		t.Errorf("%s of %s = %s on %v, want %s on %s", probe, c["name"], p, n, path, port)
	}
}

func checkPorts(t *testing.T, c map[string]any, want map[string]int64) {
	t.Helper()
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	got := map[string]int64{}
	for _, p := range ports {
		m := p.(map[string]any)
		got[m["name"].(string)] = m["containerPort"].(int64)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("container %s ports = %v, want %v", c["name"], got, want)
	}
}

// checkHardened: non-root, no privilege escalation, no capabilities, a
// read-only root file system and the runtime's seccomp profile (the
// restricted Pod Security Standard the namespace enforces).
func checkHardened(t *testing.T, d *unstructured.Unstructured) {
	t.Helper()
	pod, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	if v, _, _ := unstructured.NestedBool(pod, "securityContext", "runAsNonRoot"); !v {
		t.Errorf("%s: runAsNonRoot is not set", key(d))
	}
	if v, _, _ := unstructured.NestedInt64(pod, "securityContext", "runAsUser"); v != 65532 {
		t.Errorf("%s: runAsUser = %d, want 65532 (the images' user)", key(d), v)
	}
	if v, _, _ := unstructured.NestedString(pod, "securityContext", "seccompProfile", "type"); v != "RuntimeDefault" {
		t.Errorf("%s: seccompProfile = %q", key(d), v)
	}
	c := container(t, d)
	if v, found, _ := unstructured.NestedBool(c, "securityContext", "allowPrivilegeEscalation"); !found || v {
		t.Errorf("%s: allowPrivilegeEscalation must be false", key(d))
	}
	if v, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !v {
		t.Errorf("%s: readOnlyRootFilesystem must be true", key(d))
	}
	if v, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); !slices.Equal(v, []string{"ALL"}) {
		t.Errorf("%s: capabilities.drop = %v, want [ALL]", key(d), v)
	}
	if v, _, _ := unstructured.NestedString(c, "imagePullPolicy"); v != "IfNotPresent" {
		t.Errorf("%s: imagePullPolicy = %q, want IfNotPresent (images are built locally)", key(d), v)
	}
}

// TestReleaseManifests runs hack/release-manifests.sh with custom image
// variables and checks the three assets: contents, image references, and
// that core + extensions add up to the full install.
func TestReleaseManifests(t *testing.T) {
	out := t.TempDir()
	mustRun(t, []string{"OUT_DIR=" + out, "IMAGE_REPO=registry.example.com/agent-sandbox", "IMAGE_TAG=v1.2.3",
		"IMAGE_PULL_POLICY=Always", "KUBECTL=" + kubectlBin(t)}, repo("hack", "release-manifests.sh"))
	read := func(name string) []*unstructured.Unstructured {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return decode(t, b)
	}
	core, ext, full := read("sandbox.yaml"), read("extensions.yaml"), read("sandbox-with-extensions.yaml")
	if got := keys(core); !reflect.DeepEqual(got, coreObjects) {
		t.Errorf("sandbox.yaml holds %v", got)
	}
	if got := keys(ext); !reflect.DeepEqual(got, extensionObjects) {
		t.Errorf("extensions.yaml holds %v", got)
	}
	for name, objs := range map[string][]*unstructured.Unstructured{"sandbox.yaml": core, "extensions.yaml": ext, "sandbox-with-extensions.yaml": full} {
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				continue
			}
			c := container(t, o)
			want := "registry.example.com/agent-sandbox/router:v1.2.3"
			if o.GetName() == "agent-sandbox-controller" {
				want = "registry.example.com/agent-sandbox/controller:v1.2.3"
			}
			if c["image"] != want || c["imagePullPolicy"] != "Always" {
				t.Errorf("%s: %s runs %v (%v), want %s (Always)", name, key(o), c["image"], c["imagePullPolicy"], want)
			}
		}
	}
	// Applying sandbox.yaml then extensions.yaml must give the full install.
	merged := byKey(t, core)
	for _, o := range ext {
		merged[key(o)] = o
	}
	fullByKey := byKey(t, full)
	if !reflect.DeepEqual(merged, fullByKey) {
		for k, o := range fullByKey {
			if !reflect.DeepEqual(merged[k], o) {
				t.Errorf("sandbox.yaml + extensions.yaml differ from sandbox-with-extensions.yaml in %s", k)
			}
		}
		for k := range merged {
			if fullByKey[k] == nil {
				t.Errorf("sandbox.yaml + extensions.yaml add %s", k)
			}
		}
	}
}

// TestKustomizeDryRun validates the three variants against the apiserver.
func TestKustomizeDryRun(t *testing.T) {
	for name, components := range map[string][]string{
		"with-extensions": nil, "core-only": {"core-only"}, "extensions-only": {"extensions-only"},
	} {
		t.Run(name, func(t *testing.T) { dryRunApply(t, name, kustomizeVariant(t, components...)) })
	}
}

// TestDryRunRejects guards the dry-run tests against passing vacuously: an
// invalid object must fail the same kubectl invocation.
func TestDryRunRejects(t *testing.T) {
	ensureNamespace(t)
	file := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `apiVersion: v1
kind: Service
metadata:
  name: bad
  namespace: agent-sandbox-system
spec:
  ports:
  - port: 70000
    protocoll: TCP
`
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := command(ctx, nil, kubectlBin(t), "--kubeconfig", env.Kubeconfig,
		"apply", "--server-side", "--field-manager=install-test", "--dry-run=server", "-f", file)
	if err == nil || !strings.Contains(err.Error(), "protocoll") || !strings.Contains(err.Error(), "70000") {
		t.Fatalf("dry run of an invalid Service: %v", err)
	}
}

// checkLeaderIdentity: the controller holds its Lease under its Pod's name
// and UID, and both variables the argument names come from the downward
// API; the kubelet would pass an undefined $(VAR) through literally, giving
// every replica the same identity (the binary refuses that).
func checkLeaderIdentity(t *testing.T, c map[string]any, args []string) {
	t.Helper()
	const want = "--leader-election-identity=$(POD_NAME)_$(POD_UID)"
	if !slices.Contains(args, want) {
		t.Errorf("controller args %v lack %s", args, want)
	}
	fieldOf := map[string]string{}
	envs, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range envs {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		path, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
		if _, dup := fieldOf[name]; !dup {
			fieldOf[name] = path
		}
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_UID": "metadata.uid"} {
		if got := fieldOf[name]; got != path {
			t.Errorf("controller env %s comes from %q, want the downward API's %s (env %v)", name, got, path, envs)
		}
	}
}

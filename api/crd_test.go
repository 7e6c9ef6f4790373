// Package api_test checks the generated CRDs against a real kube-apiserver:
// what exists, what the server defaults, what it rejects and how kubectl
// shows the objects.
package api_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

var env *testenv.Env

// Every test here needs the apiserver: under -short the binary exits before
// starting one, and `make test-unit` does not build it at all.
func TestMain(m *testing.M) {
	testenv.ExitIfShort("a kube-apiserver and etcd", testenv.IntegrationTarget)
	testenv.Main(m, &env)
}

func ctx(t testing.TB) context.Context {
	t.Helper()
	testenv.SkipShort(t)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// kubectl runs the kubectl built with the test binaries against the test
// apiserver.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(env.AssetsDir, "kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl missing from %s: run hack/kube/build.sh: %v", env.AssetsDir, err)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// obj parses a YAML manifest into an unstructured object, so tests can send
// values the Go types could not express.
func obj(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("parsing manifest: %v\n%s", err, manifest)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace("default")
	}
	return u
}

const minimalPod = `
    spec:
      containers:
      - name: main
        image: busybox`

func TestCRDsInstalled(t *testing.T) {
	testenv.SkipShort(t)
	names := []string{
		"sandboxes.agents.x-k8s.io",
		"sandboxtemplates.extensions.agents.x-k8s.io",
		"sandboxwarmpools.extensions.agents.x-k8s.io",
		"sandboxclaims.extensions.agents.x-k8s.io",
	}
	for _, n := range names {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx(t), types.NamespacedName{Name: n}, crd); err != nil {
			t.Fatalf("CRD %s: %v", n, err)
		}
		if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
			t.Errorf("CRD %s scope = %s, want Namespaced", n, crd.Spec.Scope)
		}
	}
	out := kubectl(t, append([]string{"get", "crd", "-o", "name"}, names...)...)
	for _, n := range names {
		if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/"+n) {
			t.Errorf("kubectl get crd output lacks %s:\n%s", n, out)
		}
	}
}

func TestShortNames(t *testing.T) {
	testenv.SkipShort(t)
	want := map[string]string{
		"sandboxes.agents.x-k8s.io":                   "sandbox",
		"sandboxtemplates.extensions.agents.x-k8s.io": "sandboxtemplate",
		"sandboxwarmpools.extensions.agents.x-k8s.io": "swp",
		"sandboxclaims.extensions.agents.x-k8s.io":    "sandboxclaim",
	}
	for n, short := range want {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx(t), types.NamespacedName{Name: n}, crd); err != nil {
			t.Fatalf("CRD %s: %v", n, err)
		}
		if got := crd.Spec.Names.ShortNames; len(got) != 1 || got[0] != short {
			t.Errorf("CRD %s shortNames = %v, want [%s]", n, got, short)
		}
	}
}

func TestServerDefaults(t *testing.T) {
	testenv.SkipShort(t)
	c := ctx(t)
	sb := obj(t, `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: defaults}
spec:
  podTemplate:`+minimalPod)
	if err := env.Client.Create(c, sb); err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	got := &sandboxv1beta1.Sandbox{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(sb), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.OperatingMode != sandboxv1beta1.OperatingModeRunning {
		t.Errorf("operatingMode = %q, want Running", got.Spec.OperatingMode)
	}
	if got.Spec.ShutdownPolicy == nil || *got.Spec.ShutdownPolicy != sandboxv1beta1.ShutdownPolicyRetain {
		t.Errorf("shutdownPolicy = %v, want Retain", got.Spec.ShutdownPolicy)
	}
	if got.Spec.Service != nil || got.Spec.ShutdownTime != nil {
		t.Errorf("service/shutdownTime must stay unset, got %v/%v", got.Spec.Service, got.Spec.ShutdownTime)
	}

	tmpl := obj(t, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: defaults}
spec:
  podTemplate:`+minimalPod)
	if err := env.Client.Create(c, tmpl); err != nil {
		t.Fatalf("create template: %v", err)
	}
	gotT := &extv1beta1.SandboxTemplate{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(tmpl), gotT); err != nil {
		t.Fatal(err)
	}
	if gotT.Spec.NetworkPolicyManagement != extv1beta1.NetworkPolicyManagementManaged ||
		gotT.Spec.EnvVarsInjectionPolicy != extv1beta1.EnvVarsInjectionPolicyDisallowed ||
		gotT.Spec.VolumeClaimTemplatesPolicy != extv1beta1.VolumeClaimTemplatesPolicyDisallowed {
		t.Errorf("template defaults = %q/%q/%q, want Managed/Disallowed/Disallowed",
			gotT.Spec.NetworkPolicyManagement, gotT.Spec.EnvVarsInjectionPolicy, gotT.Spec.VolumeClaimTemplatesPolicy)
	}
	if gotT.Spec.NetworkPolicy != nil {
		t.Errorf("networkPolicy must stay unset (secure default), got %+v", gotT.Spec.NetworkPolicy)
	}

	pool := obj(t, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: defaults}
spec:
  sandboxTemplateRef: {name: defaults}
  updateStrategy: {}`)
	if err := env.Client.Create(c, pool); err != nil {
		t.Fatalf("create pool: %v", err)
	}
	gotP := &extv1beta1.SandboxWarmPool{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(pool), gotP); err != nil {
		t.Fatal(err)
	}
	if gotP.Spec.Replicas == nil || *gotP.Spec.Replicas != 1 {
		t.Errorf("pool replicas = %v, want 1", gotP.Spec.Replicas)
	}
	if gotP.Spec.UpdateStrategy == nil || gotP.Spec.UpdateStrategy.Type != extv1beta1.OnReplenishUpdateStrategyType {
		t.Errorf("pool updateStrategy = %+v, want OnReplenish", gotP.Spec.UpdateStrategy)
	}

	claim := obj(t, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: defaults}
spec:
  warmPoolRef: {name: defaults}
  lifecycle: {}`)
	if err := env.Client.Create(c, claim); err != nil {
		t.Fatalf("create claim: %v", err)
	}
	gotC := &extv1beta1.SandboxClaim{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(claim), gotC); err != nil {
		t.Fatal(err)
	}
	if gotC.Spec.Lifecycle == nil || gotC.Spec.Lifecycle.ShutdownPolicy != extv1beta1.ClaimShutdownPolicyRetain {
		t.Errorf("claim lifecycle = %+v, want shutdownPolicy Retain", gotC.Spec.Lifecycle)
	}
}

func TestInvalidObjectsRejected(t *testing.T) {
	testenv.SkipShort(t)
	cases := []struct {
		name     string
		manifest string
		// wantInMessage must appear in the apiserver's error: the offending
		// field path, so a user knows what to fix.
		wantInMessage string
	}{
		{"sandbox without spec", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: no-spec}`, "spec"},
		{"sandbox without podTemplate", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: no-pod-template}
spec: {operatingMode: Running}`, "spec.podTemplate"},
		{"sandbox podTemplate without spec", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: no-pod-spec}
spec:
  podTemplate:
    metadata: {labels: {a: b}}`, "spec.podTemplate.spec"},
		{"sandbox pod without containers", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: no-containers}
spec:
  podTemplate:
    spec: {restartPolicy: Never}`, "spec.podTemplate.spec.containers"},
		{"sandbox container without name", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: no-container-name}
spec:
  podTemplate:
    spec:
      containers:
      - image: busybox`, "spec.podTemplate.spec.containers[0].name"},
		{"sandbox bad operatingMode", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: bad-mode}
spec:
  operatingMode: Paused
  podTemplate:` + minimalPod, "spec.operatingMode"},
		{"sandbox bad shutdownPolicy", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: bad-policy}
spec:
  shutdownPolicy: Forever
  podTemplate:` + minimalPod, "spec.shutdownPolicy"},
		{"sandbox bad shutdownTime", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: bad-time}
spec:
  shutdownTime: tomorrow
  podTemplate:` + minimalPod, "spec.shutdownTime"},
		{"sandbox service not a bool", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: bad-service}
spec:
  service: "yes"
  podTemplate:` + minimalPod, "spec.service"},
		{"sandbox VCT without spec", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: bad-vct}
spec:
  volumeClaimTemplates:
  - metadata: {name: data}
  podTemplate:` + minimalPod, "spec.volumeClaimTemplates[0].spec"},
		{"sandbox bad name", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: Bad_Name}
spec:
  podTemplate:` + minimalPod, "metadata.name"},
		// Names the router or a Service could not carry (one DNS label of
		// at most 63 characters), refused by the CEL rule on metadata.name.
		{"sandbox name of 64 characters", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: ` + strings.Repeat("a", 64) + `}
spec:
  podTemplate:` + minimalPod, "metadata.name must be a DNS-1123 label"},
		{"sandbox name with a dot", `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: a.b}
spec:
  podTemplate:` + minimalPod, "metadata.name must be a DNS-1123 label"},
		{"claim name of 64 characters", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: ` + strings.Repeat("c", 64) + `}
spec:
  warmPoolRef: {name: p}`, "metadata.name must be a DNS-1123 label"},
		{"claim name with a dot", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: my.claim}
spec:
  warmPoolRef: {name: p}`, "metadata.name must be a DNS-1123 label"},
		{"pool name of 64 characters", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: ` + strings.Repeat("p", 64) + `}
spec:
  sandboxTemplateRef: {name: t}`, "metadata.name must be a DNS-1123 label"},
		{"pool name with a dot", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: my.pool}
spec:
  sandboxTemplateRef: {name: t}`, "metadata.name must be a DNS-1123 label"},
		{"template bad networkPolicyManagement", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: bad-npm}
spec:
  networkPolicyManagement: Sometimes
  podTemplate:` + minimalPod, "spec.networkPolicyManagement"},
		{"template bad envVarsInjectionPolicy", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: bad-env}
spec:
  envVarsInjectionPolicy: Always
  podTemplate:` + minimalPod, "spec.envVarsInjectionPolicy"},
		{"template bad volumeClaimTemplatesPolicy", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: bad-vctp}
spec:
  volumeClaimTemplatesPolicy: Sure
  podTemplate:` + minimalPod, "spec.volumeClaimTemplatesPolicy"},
		{"template without podTemplate", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: no-pod}
spec: {}`, "spec.podTemplate"},
		{"template networkPolicy ingress not a list", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: bad-np}
spec:
  networkPolicy:
    ingress: "all"
  podTemplate:` + minimalPod, "spec.networkPolicy.ingress"},
		{"pool negative replicas", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: negative}
spec:
  replicas: -1
  sandboxTemplateRef: {name: t}`, "spec.replicas"},
		{"pool without template ref", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: no-ref}
spec: {replicas: 1}`, "spec.sandboxTemplateRef"},
		{"pool template ref without name", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: no-ref-name}
spec:
  sandboxTemplateRef: {}`, "spec.sandboxTemplateRef.name"},
		{"pool template ref empty name", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: empty-ref-name}
spec:
  sandboxTemplateRef: {name: ""}`, "spec.sandboxTemplateRef.name"},
		{"pool bad update strategy", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: bad-strategy}
spec:
  sandboxTemplateRef: {name: t}
  updateStrategy: {type: RollingUpdate}`, "spec.updateStrategy.type"},
		{"pool replicas not an integer", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: string-replicas}
spec:
  replicas: many
  sandboxTemplateRef: {name: t}`, "spec.replicas"},
		{"claim without warmPoolRef", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: no-pool}
spec: {}`, "spec.warmPoolRef"},
		{"claim warmPoolRef without name", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: no-pool-name}
spec:
  warmPoolRef: {}`, "spec.warmPoolRef.name"},
		{"claim bad shutdownPolicy", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: bad-claim-policy}
spec:
  warmPoolRef: {name: p}
  lifecycle: {shutdownPolicy: Later}`, "spec.lifecycle.shutdownPolicy"},
		{"claim negative TTL", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: negative-ttl}
spec:
  warmPoolRef: {name: p}
  lifecycle: {ttlSecondsAfterFinished: -5}`, "spec.lifecycle.ttlSecondsAfterFinished"},
		{"claim env without value", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: env-no-value}
spec:
  warmPoolRef: {name: p}
  env:
  - name: FOO`, "spec.env[0].value"},
		{"claim env without name", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: env-no-name}
spec:
  warmPoolRef: {name: p}
  env:
  - value: bar`, "spec.env[0].name"},
		{"claim bad shutdownTime", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: bad-claim-time}
spec:
  warmPoolRef: {name: p}
  lifecycle: {shutdownTime: "12:00"}`, "spec.lifecycle.shutdownTime"},
		{"claim additionalPodMetadata labels not strings", `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: bad-apm}
spec:
  warmPoolRef: {name: p}
  additionalPodMetadata:
    labels: {team: {nested: true}}`, "spec.additionalPodMetadata.labels.team"},
	}
	if len(cases) < 20 {
		t.Fatalf("need at least 20 invalid objects, have %d", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx(t), obj(t, tc.manifest))
			if err == nil {
				t.Fatalf("apiserver accepted an invalid object")
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("want an Invalid/BadRequest error, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("error does not name %q:\n%v", tc.wantInMessage, err)
			}
		})
	}
}

// TestRoutableNamesAccepted: the name rule refuses only what cannot be one
// DNS label. A leading digit is allowed: since Kubernetes 1.37 Service names
// are DNS-1123 labels too (KEP-5311, RelaxedServiceNameValidation GA), so
// such a Sandbox gets its Service, which this test creates to prove it.
func TestRoutableNamesAccepted(t *testing.T) {
	testenv.SkipShort(t)
	c := ctx(t)
	long := strings.Repeat("x", 62) + "9"
	for _, m := range []string{`
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: ` + long + `}
spec:
  podTemplate:` + minimalPod, `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: 1st-sandbox}
spec:
  podTemplate:` + minimalPod, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: ` + long + `}
spec:
  warmPoolRef: {name: p}`, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: ` + long + `}
spec:
  sandboxTemplateRef: {name: t}`, `
apiVersion: v1
kind: Service
metadata: {name: 1st-sandbox}
spec:
  clusterIP: None
  selector: {a: b}`} {
		o := obj(t, m)
		if err := env.Client.Create(c, o); err != nil {
			t.Errorf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	// A pool's members are created with generateName "<pool>-": the
	// apiserver cuts the prefix so the generated name stays within 63
	// characters, hence any pool name that passes the rule yields members
	// that pass it too.
	member := obj(t, `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {generateName: `+long+`-}
spec:
  podTemplate:`+minimalPod)
	if err := env.Client.Create(c, member); err != nil {
		t.Fatalf("create pool member with generateName %s-: %v", long, err)
	}
	if n := member.GetName(); len(n) > 63 || !strings.HasPrefix(n, long[:58]) {
		t.Errorf("generated member name %q (%d characters)", n, len(n))
	}

	// Updates are not checked (names are immutable): a valid object stays
	// updatable, which is what objects created before the rule rely on.
	sb := &sandboxv1beta1.Sandbox{}
	if err := env.Client.Get(c, types.NamespacedName{Namespace: "default", Name: long}, sb); err != nil {
		t.Fatal(err)
	}
	sb.Labels = map[string]string{"updated": "yes"}
	if err := env.Client.Update(c, sb); err != nil {
		t.Errorf("update sandbox %s: %v", long, err)
	}
}

func TestSandboxVolumeClaimTemplatesImmutable(t *testing.T) {
	testenv.SkipShort(t)
	c := ctx(t)
	const vct = `
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}`
	withVCT := obj(t, `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: vct-immutable}
spec:`+vct+`
  podTemplate:`+minimalPod)
	if err := env.Client.Create(c, withVCT); err != nil {
		t.Fatalf("create: %v", err)
	}
	without := obj(t, `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: vct-unset}
spec:
  podTemplate:`+minimalPod)
	if err := env.Client.Create(c, without); err != nil {
		t.Fatalf("create: %v", err)
	}
	mutations := []struct {
		name   string
		obj    client.Object
		mutate func(u *unstructured.Unstructured)
	}{
		{"modified", withVCT, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "2Gi", "spec", "volumeClaimTemplates", "0", "spec", "resources", "requests", "storage")
			vcts, _, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates")
			vcts[0].(map[string]any)["spec"].(map[string]any)["resources"] = map[string]any{"requests": map[string]any{"storage": "2Gi"}}
			_ = unstructured.SetNestedSlice(u.Object, vcts, "spec", "volumeClaimTemplates")
		}},
		{"set to unset", withVCT, func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "spec", "volumeClaimTemplates")
		}},
		{"unset to set", without, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{
				"metadata": map[string]any{"name": "data"},
				"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}},
			}}, "spec", "volumeClaimTemplates")
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(sandboxv1beta1.GroupVersion.WithKind("Sandbox"))
			if err := env.Client.Get(c, client.ObjectKeyFromObject(m.obj), u); err != nil {
				t.Fatal(err)
			}
			m.mutate(u)
			err := env.Client.Update(c, u)
			if err == nil || !strings.Contains(err.Error(), "volumeClaimTemplates is immutable") {
				t.Fatalf("update %s: want 'volumeClaimTemplates is immutable', got %v", m.name, err)
			}
		})
	}
	// Changing anything else is still allowed.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sandboxv1beta1.GroupVersion.WithKind("Sandbox"))
	if err := env.Client.Get(c, client.ObjectKeyFromObject(withVCT), u); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, "Suspended", "spec", "operatingMode")
	if err := env.Client.Update(c, u); err != nil {
		t.Fatalf("updating operatingMode of a sandbox with VCTs: %v", err)
	}
}

func TestPrinterColumnsAndScale(t *testing.T) {
	testenv.SkipShort(t)
	c := ctx(t)
	sb := obj(t, `
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: printed}
spec:
  podTemplate:`+minimalPod)
	if err := env.Client.Create(c, sb); err != nil {
		t.Fatal(err)
	}
	// Give it a Ready condition as the controller would.
	got := &sandboxv1beta1.Sandbox{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(sb), got); err != nil {
		t.Fatal(err)
	}
	got.Status.Conditions = append(got.Status.Conditions, metaCondition("Ready", "False", "DependenciesNotReady"))
	if err := env.Client.Status().Update(c, got); err != nil {
		t.Fatalf("status update: %v", err)
	}
	out := kubectl(t, "get", "sandbox", "printed", "-n", "default")
	assertColumns(t, out, []string{"NAME", "READY", "REASON", "AGE"}, []string{"printed", "False", "DependenciesNotReady"})

	pool := obj(t, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: scaled}
spec:
  replicas: 2
  sandboxTemplateRef: {name: t}`)
	if err := env.Client.Create(c, pool); err != nil {
		t.Fatal(err)
	}
	out = kubectl(t, "get", "swp", "scaled", "-n", "default")
	assertColumns(t, out, []string{"NAME", "READY", "DESIRED", "AGE"}, []string{"scaled", "2"})

	kubectl(t, "scale", "swp/scaled", "-n", "default", "--replicas=3")
	gotP := &extv1beta1.SandboxWarmPool{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(pool), gotP); err != nil {
		t.Fatal(err)
	}
	if gotP.Spec.Replicas == nil || *gotP.Spec.Replicas != 3 {
		t.Fatalf("after kubectl scale replicas = %v, want 3", gotP.Spec.Replicas)
	}
	// The scale subresource reports status.replicas and the selector.
	gotP.Status.Replicas = 3
	gotP.Status.Selector = "agents.x-k8s.io/warm-pool-sandbox=abcd1234"
	if err := env.Client.Status().Update(c, gotP); err != nil {
		t.Fatal(err)
	}
	out = kubectl(t, "get", "--raw", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools/scaled/scale")
	for _, want := range []string{`"replicas":3`, `"selector":"agents.x-k8s.io/warm-pool-sandbox=abcd1234"`} {
		if !strings.Contains(out, want) {
			t.Errorf("scale subresource lacks %s: %s", want, out)
		}
	}

	claim := obj(t, `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: printed}
spec:
  warmPoolRef: {name: scaled}`)
	if err := env.Client.Create(c, claim); err != nil {
		t.Fatal(err)
	}
	gotC := &extv1beta1.SandboxClaim{}
	if err := env.Client.Get(c, client.ObjectKeyFromObject(claim), gotC); err != nil {
		t.Fatal(err)
	}
	gotC.Status.SandboxStatus.Name = "scaled-x7k2p"
	gotC.Status.Conditions = append(gotC.Status.Conditions, metaCondition("Ready", "True", "DependenciesReady"))
	if err := env.Client.Status().Update(c, gotC); err != nil {
		t.Fatal(err)
	}
	out = kubectl(t, "get", "sandboxclaim", "printed", "-n", "default")
	assertColumns(t, out, []string{"NAME", "READY", "SANDBOX", "REASON", "AGE"}, []string{"printed", "True", "scaled-x7k2p", "DependenciesReady"})
}

func assertColumns(t *testing.T, out string, header, values []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row, got:\n%s", out)
	}
	gotHeader := strings.Fields(lines[0])
	if strings.Join(gotHeader, " ") != strings.Join(header, " ") {
		t.Errorf("header = %v, want %v", gotHeader, header)
	}
	row := strings.Fields(lines[1])
	for i, v := range values {
		if i >= len(row) || row[i] != v {
			t.Errorf("row = %v, want column %d = %q", row, i, v)
		}
	}
}

func TestExamplesApply(t *testing.T) {
	testenv.SkipShort(t)
	root := filepath.Join(testenv.RepoRoot(), "examples")
	files, err := filepath.Glob(filepath.Join(root, "*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example manifests found in %s: %v", root, err)
	}
	kubectl(t, "create", "namespace", "examples")
	for _, f := range files {
		out := kubectl(t, "apply", "--server-side", "-n", "examples", "-f", f)
		if !strings.Contains(out, "serverside-applied") {
			t.Errorf("apply %s: %s", f, out)
		}
	}
	// The python-runtime example must be complete: the claim names the pool
	// and the pool names the template.
	pool := &extv1beta1.SandboxWarmPool{}
	if err := env.Client.Get(ctx(t), types.NamespacedName{Namespace: "examples", Name: "python-sandbox-pool"}, pool); err != nil {
		t.Fatalf("example pool: %v", err)
	}
	tmpl := &extv1beta1.SandboxTemplate{}
	if err := env.Client.Get(ctx(t), types.NamespacedName{Namespace: "examples", Name: pool.Spec.SandboxTemplateRef.Name}, tmpl); err != nil {
		t.Fatalf("template of the example pool: %v", err)
	}
	if rc := tmpl.Spec.PodTemplate.Spec.RuntimeClassName; rc == nil || *rc != "gvisor" {
		t.Errorf("example template runtimeClassName = %v, want gvisor", rc)
	}
}

package api_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// exemptLabel is the Namespace label that the shipped binding excludes.
const exemptLabel = "agents.x-k8s.io/allow-privileged-sandboxes"

// shipped reads one object of the manifests under k8s/admission: the test
// installs exactly what the release manifests and the chart ship.
func shipped(t testing.TB, name string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "k8s", "admission", name))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatalf("parsing k8s/admission/%s: %v", name, err)
	}
	return u
}

// podObject builds a Sandbox or SandboxTemplate around a pod spec given as
// YAML, with optional pod template annotations.
func podObject(t testing.TB, kind, ns, name, podSpec string, annotations map[string]any) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{}
	if err := yaml.Unmarshal([]byte(podSpec), &spec); err != nil {
		t.Fatalf("parsing pod spec: %v\n%s", err, podSpec)
	}
	apiVersion := "agents.x-k8s.io/v1beta1"
	if kind == "SandboxTemplate" {
		apiVersion = "extensions.agents.x-k8s.io/v1beta1"
	}
	tmpl := map[string]any{"spec": spec}
	if annotations != nil {
		tmpl["metadata"] = map[string]any{"annotations": annotations}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion,
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       map[string]any{"podTemplate": tmpl},
	}}
}

const privilegedPod = `
containers:
- name: main
  image: busybox
  securityContext: {privileged: true}`

// installPodSecurityPolicy creates the shipped policy and binding and waits
// until the apiserver enforces them (policies are loaded asynchronously):
// a dry-run privileged Sandbox is refused. Cleanup removes both.
func installPodSecurityPolicy(t testing.TB, ns string) {
	t.Helper()
	c := ctx(t)
	policy, binding := shipped(t, "policy.yaml"), shipped(t, "binding.yaml")
	for _, o := range []*unstructured.Unstructured{policy, binding} {
		if err := env.Client.Create(c, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := env.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", o.GetName(), err)
			}
		})
	}
	err := wait.PollUntilContextTimeout(c, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		err := env.Client.Create(ctx, podObject(t, "Sandbox", ns, "probe", privilegedPod, nil), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "privileged containers are not allowed"), nil
	})
	if err != nil {
		t.Fatalf("the policy is not enforced after 20s: %v", err)
	}
}

func namespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := env.Client.Create(ctx(t), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// TestPodSecurityPolicy performs each attack the shipped
// ValidatingAdmissionPolicy exists for, against a real apiserver: every
// dangerous field is refused with its path in the message, in containers,
// init containers and ephemeral containers and for both kinds that carry a
// pod template; benign specs, the examples and exempt namespaces pass.
func TestPodSecurityPolicy(t *testing.T) {
	testenv.SkipShort(t)
	namespace(t, "vap", nil)
	namespace(t, "vap-exempt", map[string]string{exemptLabel: "true"})
	namespace(t, "vap-not-exempt", map[string]string{exemptLabel: "false"})
	namespace(t, "vap-legacy", nil)
	c := ctx(t)

	// Admitted before the policy exists: it must stay manageable.
	legacy := podObject(t, "Sandbox", "vap-legacy", "legacy", privilegedPod, nil)
	if err := env.Client.Create(c, legacy); err != nil {
		t.Fatalf("create legacy sandbox: %v", err)
	}

	installPodSecurityPolicy(t, "vap")

	cases := []struct {
		name, kind, pod string
		annotations     map[string]any
		want            []string // all must appear in the error
	}{
		{"privileged container", "Sandbox", privilegedPod, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.privileged", "privileged containers are not allowed"}},
		{"privileged init container", "Sandbox", `
containers: [{name: main, image: busybox}]
initContainers:
- {name: init, image: busybox}
- {name: init2, image: busybox, securityContext: {privileged: true}}`, nil,
			[]string{"spec.podTemplate.spec.initContainers[1].securityContext.privileged"}},
		{"privileged ephemeral container", "Sandbox", `
containers: [{name: main, image: busybox}]
ephemeralContainers:
- {name: debug, image: busybox, securityContext: {privileged: true}}`, nil,
			[]string{"spec.podTemplate.spec.ephemeralContainers[0].securityContext.privileged"}},
		{"privileged template", "SandboxTemplate", privilegedPod, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.privileged"}},
		{"hostNetwork", "Sandbox", `
hostNetwork: true
containers: [{name: main, image: busybox}]`, nil,
			[]string{"spec.podTemplate.spec.hostNetwork", "must not share the host network"}},
		{"hostNetwork template", "SandboxTemplate", `
hostNetwork: true
containers: [{name: main, image: busybox}]`, nil,
			[]string{"spec.podTemplate.spec.hostNetwork"}},
		{"hostPID and hostIPC", "Sandbox", `
hostPID: true
hostIPC: true
containers: [{name: main, image: busybox}]`, nil,
			[]string{"spec.podTemplate.spec.hostPID", "spec.podTemplate.spec.hostIPC"}},
		{"hostPath volume", "Sandbox", `
containers: [{name: main, image: busybox}]
volumes:
- {name: scratch, emptyDir: {}}
- {name: root, hostPath: {path: /}}`, nil,
			[]string{"spec.podTemplate.spec.volumes[1].hostPath", "hostPath volumes are not allowed"}},
		{"hostPath volume template", "SandboxTemplate", `
containers: [{name: main, image: busybox}]
volumes: [{name: root, hostPath: {path: /}}]`, nil,
			[]string{"spec.podTemplate.spec.volumes[0].hostPath"}},
		{"host port", "Sandbox", `
containers:
- {name: main, image: busybox, ports: [{containerPort: 80}, {containerPort: 8080, hostPort: 8080}]}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].ports[1].hostPort", "host ports are not allowed"}},
		{"added capability", "Sandbox", `
containers:
- {name: main, image: busybox}
- {name: side, image: busybox, securityContext: {capabilities: {add: [NET_BIND_SERVICE, SYS_ADMIN]}}}`, nil,
			[]string{"spec.podTemplate.spec.containers[1].securityContext.capabilities.add SYS_ADMIN", "may be added"}},
		{"added capability with CAP_ prefix", "Sandbox", `
containers:
- {name: main, image: busybox, securityContext: {capabilities: {add: [CAP_SYS_ADMIN]}}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.capabilities.add CAP_SYS_ADMIN"}},
		{"added capability ALL in init container", "SandboxTemplate", `
containers: [{name: main, image: busybox}]
initContainers:
- {name: init, image: busybox, securityContext: {capabilities: {add: [ALL]}}}`, nil,
			[]string{"spec.podTemplate.spec.initContainers[0].securityContext.capabilities.add ALL"}},
		{"allowPrivilegeEscalation", "Sandbox", `
containers:
- {name: main, image: busybox, securityContext: {allowPrivilegeEscalation: true}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.allowPrivilegeEscalation"}},
		{"procMount Unmasked", "Sandbox", `
containers:
- {name: main, image: busybox, securityContext: {procMount: Unmasked}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.procMount", "hostUsers: false"}},
		{"unsafe sysctl", "Sandbox", `
securityContext:
  sysctls: [{name: net.ipv4.tcp_syncookies, value: "1"}, {name: kernel.msgmax, value: "65536"}]
containers: [{name: main, image: busybox}]`, nil,
			[]string{"spec.podTemplate.spec.securityContext.sysctls: kernel.msgmax not allowed"}},
		{"SELinux type at pod level", "Sandbox", `
securityContext: {seLinuxOptions: {type: spc_t}}
containers: [{name: main, image: busybox}]`, nil,
			[]string{"spec.podTemplate.spec.securityContext.seLinuxOptions"}},
		{"SELinux user in container", "Sandbox", `
containers:
- {name: main, image: busybox, securityContext: {seLinuxOptions: {user: system_u}}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.seLinuxOptions"}},
		{"seccomp Unconfined", "Sandbox", `
containers:
- {name: main, image: busybox, securityContext: {seccompProfile: {type: Unconfined}}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.seccompProfile.type", "Unconfined"}},
		{"AppArmor Unconfined at pod level", "SandboxTemplate", `
securityContext: {appArmorProfile: {type: Unconfined}}
containers: [{name: main, image: busybox}]`, nil,
			[]string{"spec.podTemplate.spec.securityContext.appArmorProfile.type"}},
		{"AppArmor unconfined annotation", "Sandbox", `
containers: [{name: main, image: busybox}]`,
			map[string]any{"container.apparmor.security.beta.kubernetes.io/main": "unconfined"},
			[]string{"spec.podTemplate.metadata.annotations[container.apparmor.security.beta.kubernetes.io/main]"}},
		{"Windows host process", "Sandbox", `
containers:
- {name: main, image: busybox, securityContext: {windowsOptions: {hostProcess: true}}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].securityContext.windowsOptions.hostProcess"}},
		{"probe aimed at another host", "Sandbox", `
containers:
- name: main
  image: busybox
  readinessProbe: {httpGet: {host: 169.254.169.254, path: /, port: 80}}`, nil,
			[]string{"spec.podTemplate.spec.containers[0].readinessProbe", "must not set host"}},
		{"sidecar lifecycle hook aimed at another host", "Sandbox", `
containers: [{name: main, image: busybox}]
initContainers:
- name: sidecar
  image: busybox
  restartPolicy: Always
  lifecycle: {preStop: {tcpSocket: {host: 10.0.0.1, port: 22}}}`, nil,
			[]string{"spec.podTemplate.spec.initContainers[0].lifecycle.preStop"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, ns := range []string{"vap", "vap-not-exempt"} {
				err := env.Client.Create(ctx(t), podObject(t, tc.kind, ns, "attack", tc.pod, tc.annotations))
				if err == nil {
					t.Fatalf("namespace %s: the apiserver accepted the %s", ns, tc.name)
				}
				if ns == "vap" {
					t.Log(err)
				}
				if !apierrors.IsInvalid(err) {
					t.Errorf("namespace %s: want an Invalid error, got %v", ns, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("namespace %s: error does not name %q:\n%v", ns, w, err)
					}
				}
			}
			// The exempt namespace takes the same object.
			o := podObject(t, tc.kind, "vap-exempt", fmt.Sprintf("exempt-%d", i), tc.pod, tc.annotations)
			if err := env.Client.Create(ctx(t), o); err != nil {
				t.Errorf("exempt namespace refused the %s: %v", tc.name, err)
			}
		})
	}

	// What a hardened sandbox legitimately sets passes.
	const benign = `
runtimeClassName: gvisor
hostUsers: false
hostNetwork: false
automountServiceAccountToken: false
securityContext:
  runAsNonRoot: true
  seccompProfile: {type: RuntimeDefault}
  appArmorProfile: {type: RuntimeDefault}
  seLinuxOptions: {type: container_t, level: "s0:c1,c2"}
  sysctls: [{name: net.ipv4.ping_group_range, value: "0 2147483647"}]
containers:
- name: main
  image: busybox
  ports: [{containerPort: 8888}]
  readinessProbe: {httpGet: {path: /, port: 8888}}
  securityContext:
    privileged: false
    allowPrivilegeEscalation: false
    procMount: Unmasked
    capabilities: {drop: [ALL], add: [NET_BIND_SERVICE, CHOWN]}
    seccompProfile: {type: Localhost, localhostProfile: profiles/sandbox.json}
volumes: [{name: scratch, emptyDir: {}}]`
	for _, kind := range []string{"Sandbox", "SandboxTemplate"} {
		o := podObject(t, kind, "vap", "benign", benign,
			map[string]any{"container.apparmor.security.beta.kubernetes.io/main": "runtime/default"})
		if err := env.Client.Create(c, o); err != nil {
			t.Errorf("benign %s refused: %v", kind, err)
		}
	}

	// Turning an admitted Sandbox privileged by an update is refused too.
	sb := podObject(t, "Sandbox", "vap", "turned", "containers: [{name: main, image: busybox}]", nil)
	if err := env.Client.Create(c, sb); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := unstructured.SetNestedField(sb.Object, true, "spec", "podTemplate", "spec", "hostNetwork"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(c, sb); err == nil || !strings.Contains(err.Error(), "spec.podTemplate.spec.hostNetwork") {
		t.Errorf("update to hostNetwork: want refusal naming the field, got %v", err)
	}

	// The legacy privileged Sandbox: a metadata update passes (nothing
	// judged changed), a pod template change is judged.
	if err := env.Client.Get(c, client.ObjectKeyFromObject(legacy), legacy); err != nil {
		t.Fatal(err)
	}
	legacy.SetLabels(map[string]string{"touched": "yes"})
	if err := env.Client.Update(c, legacy); err != nil {
		t.Errorf("label update of a Sandbox admitted before the policy: %v", err)
	}
	containers, _, _ := unstructured.NestedSlice(legacy.Object, "spec", "podTemplate", "spec", "containers")
	containers[0].(map[string]any)["image"] = "busybox:2"
	_ = unstructured.SetNestedSlice(legacy.Object, containers, "spec", "podTemplate", "spec", "containers")
	var statusErr *apierrors.StatusError
	if err := env.Client.Update(c, legacy); !errors.As(err, &statusErr) || !strings.Contains(err.Error(), "securityContext.privileged") {
		t.Errorf("pod template update of the legacy privileged Sandbox: want refusal, got %v", err)
	}

	// The shipped examples pass the policy as they are.
	examples, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "examples", "*", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range examples {
		kubectl(t, "apply", "--server-side", "--dry-run=server", "-n", "vap", "-f", f)
	}
}

// BenchmarkSandboxAdmission prints what the policy adds to a Sandbox create:
// server-side dry-run creates (admission and validation, no etcd write) of
// a three-container Sandbox, without and then with the policy installed.
//
//	go test -run '^$' -bench BenchmarkSandboxAdmission -benchtime 300x ./api/
func BenchmarkSandboxAdmission(b *testing.B) {
	namespace(b, "vap-bench", nil)
	const pod = `
securityContext: {seccompProfile: {type: RuntimeDefault}}
initContainers: [{name: init, image: busybox}]
containers:
- {name: main, image: busybox, ports: [{containerPort: 8888}], securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}}
- {name: side, image: busybox, readinessProbe: {httpGet: {path: /, port: 8080}}}
volumes: [{name: scratch, emptyDir: {}}]`
	run := func(b *testing.B) {
		b.Helper()
		c := ctx(b)
		for i := 0; b.Loop(); i++ {
			if err := env.Client.Create(c, podObject(b, "Sandbox", "vap-bench", fmt.Sprintf("bench-%d", i), pod, nil), client.DryRunAll); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("without-policy", run)
	b.Run("with-policy", func(b *testing.B) {
		installPodSecurityPolicy(b, "vap-bench")
		run(b)
	})
}

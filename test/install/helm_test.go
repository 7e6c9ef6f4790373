package install

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// chartValues are --set arguments that turn on every optional part of the
// chart at once.
var chartValues = []string{
	"--set", "replicaCount=2",
	"--set", "controller.kubeApiQps=50.5",
	"--set", "controller.kubeApiBurst=100",
	"--set", "controller.sandboxConcurrentWorkers=1000000",
	"--set", "controller.sandboxWarmPoolReplenishDelay=250ms",
	"--set", "controller.cacheLabelSelectors=true",
	"--set", "controller.zapLogLevel=debug",
	"--set", "controller.extraArgs[0]=--zap-encoder=console",
	"--set", "controller.env[0].name=OTEL_EXPORTER_OTLP_ENDPOINT",
	"--set", "controller.env[0].value=http://collector:4317",
	"--set", "controller.allowedLabelDomains[0]=example.com",
	"--set", "podLabels.team=agents",
	"--set", "podAnnotations.example\\.com/owner=agents",
	"--set", "nodeSelector.kubernetes\\.io/os=linux",
	"--set", "tolerations[0].key=dedicated",
	"--set", "tolerations[0].operator=Exists",
	"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/arch",
	"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
	"--set", "priorityClassName=system-cluster-critical",
	"--set", "resources.limits.cpu=2",
	"--set", "imagePullSecrets[0].name=registry",
	"--set", "router.replicas=3",
	"--set", "router.flags.authzMode=tokenreview",
	"--set", "router.flags.idleSuspendAfter=15m",
	"--set", "router.flags.defaultSandboxPorts=8888\\,8080",
	"--set", "router.flags.autoResume=false",
	"--set", "router.service.type=NodePort",
	"--set", "router.service.annotations.example\\.com/lb=internal",
	"--set", "router.podLabels.team=agents",
	"--set", "metrics.serviceMonitor.enabled=true",
	"--set", "metrics.serviceMonitor.additionalLabels.release=prometheus",
	"--set", "metrics.prometheusRule.enabled=true",
}

// TestChartCopiesGenerated: the chart ships copies of the generated CRDs
// and ClusterRoles (Helm reads files only from inside the chart); they must
// equal the generated ones.
func TestChartCopiesGenerated(t *testing.T) {
	same := func(src, dst string) {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(dst)
		if err != nil {
			t.Fatalf("%v: copy %s into the chart (make generate)", err, src)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run make generate", dst, src)
		}
	}
	crds, err := filepath.Glob(repo("k8s", "crd", "*.yaml"))
	if err != nil || len(crds) != 4 {
		t.Fatalf("k8s/crd holds %v (%v), want 4 CRDs", crds, err)
	}
	for _, c := range crds {
		same(c, repo("charts", "agent-sandbox", "crds", filepath.Base(c)))
	}
	copies, _ := filepath.Glob(repo("charts", "agent-sandbox", "crds", "*"))
	if len(copies) != len(crds) {
		t.Errorf("charts/agent-sandbox/crds holds %d files, k8s/crd %d", len(copies), len(crds))
	}
	same(repo("k8s", "rbac", "core", "role.yaml"), repo("charts", "agent-sandbox", "files", "rbac", "core-role.yaml"))
	same(repo("k8s", "rbac", "extensions", "role.yaml"), repo("charts", "agent-sandbox", "files", "rbac", "extensions-role.yaml"))
	same(repo("k8s", "admission", "policy.yaml"), repo("charts", "agent-sandbox", "files", "admission", "policy.yaml"))
	same(repo("k8s", "admission", "hibernation-policy.yaml"), repo("charts", "agent-sandbox", "files", "admission", "hibernation-policy.yaml"))
}

func TestHelmLint(t *testing.T) {
	for name, args := range map[string][]string{
		"defaults":   nil,
		"minimal":    {"--set", "controller.extensions=false", "--set", "router.enabled=false"},
		"everything": chartValues,
	} {
		t.Run(name, func(t *testing.T) {
			out, err := helm(t, append([]string{"lint", "--strict", repo("charts", "agent-sandbox"), "--namespace", Namespace}, args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// withoutCRDs drops the CRDs (raw copies from crds/, without chart labels).
func withoutCRDs(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "CustomResourceDefinition"
	})
}

// TestHelmMatchesKustomize: by default the chart installs the same objects
// as the kustomize base, with the same properties; the Namespace is Helm's
// (--create-namespace).
func TestHelmMatchesKustomize(t *testing.T) {
	chart := decode(t, helmTemplate(t))
	base := decode(t, []byte(mustRun(t, nil, kubectlBin(t), "kustomize", repo("k8s"))))
	base = slices.DeleteFunc(base, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Namespace" })
	if got, want := keys(chart), keys(base); !reflect.DeepEqual(got, want) {
		t.Fatalf("helm template renders\n%s\nkustomize\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkInstall(t, withoutCRDs(chart), true)
	// Same RBAC rules: both come from the generated ClusterRoles.
	for _, k := range []string{"ClusterRole//agent-sandbox-controller", "ClusterRole//agent-sandbox-controller-extensions",
		"ClusterRole//agent-sandbox-router", "Role/agent-sandbox-system/agent-sandbox-controller-leader-election"} {
		if a, b := get(t, chart, k).Object["rules"], get(t, base, k).Object["rules"]; !reflect.DeepEqual(a, b) {
			t.Errorf("%s: chart rules %v, kustomize rules %v", k, a, b)
		}
	}
	// Same admission policy and binding: the chart's policy spec is a copy
	// of k8s/admission/policy.yaml, the one api/admission_test.go tests.
	for _, k := range []string{"ValidatingAdmissionPolicy//agent-sandbox-pod-security", "ValidatingAdmissionPolicyBinding//agent-sandbox-pod-security"} {
		if a, b := get(t, chart, k).Object["spec"], get(t, base, k).Object["spec"]; !reflect.DeepEqual(a, b) {
			t.Errorf("%s: chart spec %v\nkustomize spec %v", k, a, b)
		}
	}
}

func TestHelmToggles(t *testing.T) {
	objs := decode(t, helmTemplate(t, "--set", "controller.extensions=false", "--set", "router.enabled=false"))
	for _, k := range keys(objs) {
		if strings.Contains(k, "router") || strings.Contains(k, "extensions") && !strings.HasPrefix(k, "CustomResourceDefinition/") {
			t.Errorf("extensions and router off, yet %s is rendered", k)
		}
	}
	if args := controllerArgs(t, objs); slices.Contains(args, "--extensions") {
		t.Errorf("extensions off, yet controller args are %v", args)
	}

	objs = decode(t, helmTemplate(t, "--set", "admissionPolicy.enabled=false"))
	for _, k := range keys(objs) {
		if strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
			t.Errorf("admissionPolicy.enabled=false, yet %s is rendered", k)
		}
	}
	objs = decode(t, helmTemplate(t, "--set", "admissionPolicy.validationActions={Warn,Audit}"))
	if a, _, _ := unstructured.NestedStringSlice(get(t, objs, "ValidatingAdmissionPolicyBinding//agent-sandbox-pod-security").Object,
		"spec", "validationActions"); !reflect.DeepEqual(a, []string{"Warn", "Audit"}) {
		t.Errorf("binding validationActions = %v, want [Warn Audit]", a)
	}

	objs = decode(t, helmTemplate(t, chartValues...))
	args := controllerArgs(t, objs)
	for _, want := range []string{"--kube-api-qps=50.5", "--kube-api-burst=100", "--sandbox-concurrent-workers=1000000",
		"--sandbox-warm-pool-replenish-delay=250ms", "--cache-label-selectors=true", "--zap-log-level=debug", "--zap-encoder=console"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %v lack %s", args, want)
		}
	}
	rargs, _, _ := unstructured.NestedStringSlice(container(t, get(t, objs, "Deployment/agent-sandbox-system/sandbox-router")), "args")
	for _, want := range []string{"--authz-mode=tokenreview", "--idle-suspend-after=15m", "--default-sandbox-ports=8888,8080", "--auto-resume=false"} {
		if !slices.Contains(rargs, want) {
			t.Errorf("router args %v lack %s", rargs, want)
		}
	}
	for _, k := range []string{"ClusterRoleBinding//agent-sandbox-router-auth-delegator", "ServiceMonitor/agent-sandbox-system/agent-sandbox",
		"PrometheusRule/agent-sandbox-system/agent-sandbox", "ConfigMap/agent-sandbox-system/agent-sandbox-config"} {
		get(t, objs, k)
	}
	cm := get(t, objs, "ConfigMap/agent-sandbox-system/agent-sandbox-config")
	if d, _, _ := unstructured.NestedString(cm.Object, "data", "allowed-label-domains"); strings.TrimSpace(d) != "example.com" {
		t.Errorf("allowed-label-domains = %q", d)
	}
	labels, _, _ := unstructured.NestedStringMap(get(t, objs, "Deployment/agent-sandbox-system/sandbox-router").Object,
		"spec", "template", "metadata", "labels")
	if labels["team"] != "agents" || labels["app"] != "sandbox-router" {
		t.Errorf("router pod labels = %v", labels)
	}

	// The chart's own pod labels win over podLabels: app=sandbox-router is
	// what the sandboxes' NetworkPolicy admits.
	objs = decode(t, helmTemplate(t, "--set", "router.podLabels.app=other", "--set", "podLabels.app=other"))
	for _, d := range []string{"sandbox-router", "agent-sandbox-controller"} {
		labels, _, _ := unstructured.NestedStringMap(get(t, objs, "Deployment/agent-sandbox-system/"+d).Object,
			"spec", "template", "metadata", "labels")
		if labels["app"] != d {
			t.Errorf("%s pod label app = %q after podLabels.app=other", d, labels["app"])
		}
	}

	// Scoped tokens mount the secret and point the flag at it.
	objs = decode(t, helmTemplate(t, "--set", "router.flags.authzMode=scoped-token", "--set", "router.scopedTokenSecret.name=router-hmac"))
	rargs, _, _ = unstructured.NestedStringSlice(container(t, get(t, objs, "Deployment/agent-sandbox-system/sandbox-router")), "args")
	if !slices.Contains(rargs, "--authz-scoped-token-secret-file=/etc/sandbox-router/scoped-token/secret") {
		t.Errorf("router args %v lack the scoped token file", rargs)
	}
}

// monitoringCRDs stand in for prometheus-operator's CRDs so the
// ServiceMonitor and PrometheusRule can be dry-run applied.
const monitoringCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

func TestHelmDryRun(t *testing.T) {
	crds := filepath.Join(t.TempDir(), "monitoring-crds.yaml")
	if err := os.WriteFile(crds, []byte(monitoringCRDs), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "--server-side", "-f", crds)
	kubectl(t, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	for name, args := range map[string][]string{
		"defaults":     nil,
		"minimal":      {"--set", "controller.extensions=false", "--set", "router.enabled=false"},
		"everything":   chartValues,
		"scoped-token": {"--set", "router.flags.authzMode=scoped-token", "--set", "router.scopedTokenSecret.name=router-hmac"},
	} {
		t.Run(name, func(t *testing.T) { dryRunApply(t, "helm-"+name, helmTemplate(t, args...)) })
	}
}

// TestHelmBadValues: wrong types, unknown keys and out-of-range values fail
// before anything is sent to the cluster, with a message naming the value.
func TestHelmBadValues(t *testing.T) {
	valuesFile := func(content string) []string {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"-f", f}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // all must appear in the error
	}{
		{"replicas not a number", []string{"--set", "replicaCount=two"}, []string{"/replicaCount", "want integer"}},
		{"negative replicas", []string{"--set", "router.replicas=-1"}, []string{"/router/replicas"}},
		{"misspelt controller key", []string{"--set", "controller.leaderElection=true"}, []string{"/controller", "'leaderElection' not allowed"}},
		{"unknown top-level key", []string{"--set", "extension=true"}, []string{"'extension' not allowed"}},
		{"unknown flag", []string{"--set", "controller.kubeAPIQPS=5"}, []string{"/controller", "'kubeAPIQPS' not allowed"}},
		{"flag of wrong type", []string{"--set", "controller.kubeApiBurst=lots"}, []string{"/controller/kubeApiBurst"}},
		{"float flag not a number", []string{"--set", "controller.kubeApiQps=fast"}, []string{"/controller/kubeApiQps"}},
		{"flag out of range", []string{"--set", "controller.sandboxConcurrentWorkers=0"}, []string{"/controller/sandboxConcurrentWorkers"}},
		{"bad duration", []string{"--set", "router.flags.idleSuspendAfter=15 minutes"}, []string{"/router/flags/idleSuspendAfter"}},
		{"duration as number", []string{"--set", "router.flags.proxyTimeout=30"}, []string{"/router/flags/proxyTimeout"}},
		{"bad enum", []string{"--set", "router.flags.authzMode=open"}, []string{"/router/flags/authzMode"}},
		{"bad pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{"/image/pullPolicy"}},
		{"toggle not a boolean", []string{"--set", "router.enabled=maybe"}, []string{"/router/enabled", "want boolean"}},
		{"servicemonitor toggle", []string{"--set", "metrics.serviceMonitor.enabled=yes"}, []string{"/metrics/serviceMonitor/enabled"}},
		{"resources typo", []string{"--set", "resources.limit.cpu=1"}, []string{"/resources", "'limit' not allowed"}},
		{"port out of range", []string{"--set", "router.service.port=70000"}, []string{"/router/service/port"}},
		{"pod labels not strings", valuesFile("podLabels:\n  team: [a, b]\n"), []string{"/podLabels/team"}},
		{"tolerations not a list", valuesFile("router:\n  tolerations: {key: a}\n"), []string{"/router/tolerations", "want array"}},
		{"security context not a map", valuesFile("podSecurityContext: restricted\n"), []string{"/podSecurityContext"}},
		{"fractional tag as number", valuesFile("image:\n  tag: 1.10\n"), []string{"/image/tag"}},
		{"bad label domain", []string{"--set", "controller.allowedLabelDomains[0]=Not A Domain"}, []string{"/controller/allowedLabelDomains/0"}},
		{"bad admission action", []string{"--set", "admissionPolicy.validationActions={Block}"}, []string{"/admissionPolicy/validationActions/0"}},
		{"deny and warn together", []string{"--set", "admissionPolicy.validationActions={Deny,Warn}"}, []string{"/admissionPolicy/validationActions"}},
		{"no admission action", valuesFile("admissionPolicy:\n  validationActions: []\n"), []string{"/admissionPolicy/validationActions"}},
		{"scoped token without secret", []string{"--set", "router.flags.authzMode=scoped-token"}, []string{"router.scopedTokenSecret.name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "agent-sandbox", repo("charts", "agent-sandbox"), "--namespace", Namespace}, tc.args...)...)
			if err == nil {
				t.Fatalf("helm template %v succeeded:\n%.400s", tc.args, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// Deep hibernation is off by default; controller.deepHibernation=true adds
// the flag, the node agent DaemonSet with pods-only RBAC, and the admission
// policy naming the release namespace's ServiceAccounts.
func TestHelmDeepHibernation(t *testing.T) {
	for _, k := range keys(decode(t, helmTemplate(t))) {
		if strings.Contains(k, "hibernat") {
			t.Errorf("deep hibernation is off by default, yet %s is rendered", k)
		}
	}
	objs := decode(t, helmTemplate(t, "--namespace", "sbx", "--set", "controller.deepHibernation=true", "--set", "controller.checkpointTimeout=20s",
		"--set-string", "hibernationAgent.nodeSelector.gvisor=true"))
	args, _, _ := unstructured.NestedStringSlice(container(t, get(t, objs, "Deployment/sbx/agent-sandbox-controller")), "args")
	for _, want := range []string{"--deep-hibernation=true", "--checkpoint-timeout=20s"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller args %v lack %s", args, want)
		}
	}
	ds := get(t, objs, "DaemonSet/sbx/sandbox-hibernate-agent")
	if pid, _, _ := unstructured.NestedBool(ds.Object, "spec", "template", "spec", "hostPID"); !pid {
		t.Error("the agent must run in the host PID namespace")
	}
	if sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "spec", "nodeSelector"); sel["gvisor"] != "true" {
		t.Errorf("agent nodeSelector = %v", sel)
	}
	aargs, _, _ := unstructured.NestedStringSlice(container(t, ds), "args")
	for _, want := range []string{"--node-name=$(NODE_NAME)", "--runsc-root=/run/containerd/runsc/k8s.io", "--store=/var/lib/agent-sandbox/hibernate"} {
		if !slices.Contains(aargs, want) {
			t.Errorf("agent args %v lack %s", aargs, want)
		}
	}
	rules, _, _ := unstructured.NestedSlice(get(t, objs, "ClusterRole//agent-sandbox-hibernate-agent").Object, "rules")
	if len(rules) != 2 || !reflect.DeepEqual(rules[0].(map[string]any)["resources"], []any{"pods"}) ||
		!reflect.DeepEqual(rules[1].(map[string]any)["resources"], []any{"sandboxes"}) ||
		!reflect.DeepEqual(rules[1].(map[string]any)["verbs"], []any{"get"}) {
		t.Errorf("agent rules = %v, want pods, and get on sandboxes", rules)
	}
	pol := get(t, objs, "ValidatingAdmissionPolicy//agent-sandbox-hibernation")
	vars, _, _ := unstructured.NestedSlice(pol.Object, "spec", "variables")
	var exprs []string
	for _, v := range vars {
		exprs = append(exprs, v.(map[string]any)["expression"].(string))
	}
	joined := strings.Join(exprs, "\n")
	if !strings.Contains(joined, "system:serviceaccount:sbx:agent-sandbox-controller") ||
		!strings.Contains(joined, "system:serviceaccount:sbx:sandbox-hibernate-agent") || strings.Contains(joined, "agent-sandbox-system") {
		t.Errorf("policy identities are not the release namespace's:\n%s", joined)
	}
	get(t, objs, "ValidatingAdmissionPolicyBinding//agent-sandbox-hibernation")
}

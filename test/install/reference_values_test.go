package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// refNamespace is where the reference-values install goes: not the default
// namespace, so that namespace.name is seen to move every object.
const refNamespace = "agents-ref"

// referenceValues sets every value of the reference chart (helm/values.yaml
// of kubernetes-sigs/agent-sandbox) to a non-default value.
const referenceValues = `
namespace:
  create: true
  name: agents-ref
image:
  repository: registry.example.com/team/agent-sandbox-controller
  tag: v9.8.7
  pullPolicy: Always
imagePullSecrets:
- name: pull-secret
replicaCount: 3
podAnnotations:
  ad.datadoghq.com/agent-sandbox-controller.check_names: '["openmetrics"]'
podLabels:
  team: platform
controller:
  leaderElect: false
  extensions: true
  clusterDomain: corp.local
  leaderElectionNamespace: agents-ref
  enableTracing: true
  enablePprof: true
  enablePprofDebug: true
  pprofBlockProfileRate: 2000000
  pprofMutexProfileFraction: 5
  kubeApiQps: 50.5
  kubeApiBurst: 100
  apiConnections: 4
  separateWatchConnection: true
  sandboxConcurrentWorkers: 200
  cacheLabelSelectors: true
  sandboxWriteBehindWindow: 500ms
  sandboxClaimConcurrentWorkers: 60
  sandboxWarmPoolConcurrentWorkers: 2
  sandboxTemplateConcurrentWorkers: 3
  sandboxWarmPoolMaxBatchSize: 150
  sandboxWarmPoolReplenishDelay: 2s
  sandboxWarmPoolMaxRefillRate: 2.5
  sandboxWarmPoolReadinessGracePeriod: 10m
  sandboxWarmPoolUnschedulableRecheckInterval: 2m
  enableWarmPoolEviction: false
  disableClaimEvents: true
  disableClaimObservabilityAnnotations: true
  extraArgs:
  - --zap-log-level=debug
resources:
  limits:
    cpu: 500m
    memory: 128Mi
  requests:
    cpu: 10m
    memory: 64Mi
nodeSelector:
  kubernetes.io/os: linux
tolerations:
- key: dedicated
  operator: Equal
  value: agents
  effect: NoSchedule
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/arch
          operator: In
          values: [amd64]
podSecurityContext:
  runAsNonRoot: true
  fsGroup: 2000
  seccompProfile:
    type: RuntimeDefault
containerSecurityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsUser: 1234
  capabilities:
    drop: [ALL]
webhookServiceName: my-webhook-service
service:
  name: my-controller-metrics
metrics:
  serviceMonitor:
    enabled: true
    additionalLabels:
      release: kube-prometheus-stack
    interval: 15s
    scrapeTimeout: 10s
  prometheusRule:
    enabled: true
    additionalLabels:
      release: kube-prometheus-stack
    additionalGroups:
    - name: my-extra.rules
      rules:
      - alert: MyAlert
        expr: vector(1)
`

// TestHelmReferenceValues renders the chart with every value of the
// reference chart set, checks that each lands where the reference chart
// puts it, and sends the result to the apiserver (server-side dry run).
func TestHelmReferenceValues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "reference-values.yaml")
	if err := os.WriteFile(file, []byte(referenceValues), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := withoutCRDs(decode(t, helmTemplate(t, "-f", file)))

	// namespace.create and namespace.name: a Namespace object, and every
	// namespaced object in it.
	get(t, objs, "Namespace//"+refNamespace)
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			continue
		}
		if o.GetNamespace() != refNamespace {
			t.Errorf("%s is not in namespace.name %s", key(o), refNamespace)
		}
	}
	for _, k := range []string{"ClusterRoleBinding//agent-sandbox-controller", "ClusterRoleBinding//agent-sandbox-controller-extensions"} {
		subjects, _, _ := unstructured.NestedSlice(get(t, objs, k).Object, "subjects")
		if len(subjects) != 1 || subjects[0].(map[string]any)["namespace"] != refNamespace {
			t.Errorf("%s subjects %v, want the ServiceAccount in %s", k, subjects, refNamespace)
		}
	}

	d := get(t, objs, "Deployment/"+refNamespace+"/agent-sandbox-controller")
	c := container(t, d)
	field := func(obj map[string]any, path ...string) any {
		t.Helper()
		v, _, err := unstructured.NestedFieldNoCopy(obj, path...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	expect := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", what, got, want)
		}
	}
	// image.*, imagePullSecrets, replicaCount.
	expect("image (image.repository:image.tag)", c["image"], "registry.example.com/team/agent-sandbox-controller:v9.8.7")
	expect("imagePullPolicy (image.pullPolicy)", c["imagePullPolicy"], "Always")
	expect("imagePullSecrets", field(d.Object, "spec", "template", "spec", "imagePullSecrets"), []any{map[string]any{"name": "pull-secret"}})
	expect("replicas (replicaCount)", field(d.Object, "spec", "replicas"), int64(3))
	// podAnnotations and podLabels on the pod template; the selector labels stay.
	ann, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "annotations")
	expect("pod annotation (podAnnotations)", ann["ad.datadoghq.com/agent-sandbox-controller.check_names"], `["openmetrics"]`)
	labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	expect("pod label team (podLabels)", labels["team"], "platform")
	selector, _, _ := unstructured.NestedStringMap(d.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		expect("pod label "+k+" (selector)", labels[k], v)
	}
	// resources, nodeSelector, tolerations, affinity, security contexts.
	expect("resources", field(c, "resources"), map[string]any{
		"limits":   map[string]any{"cpu": "500m", "memory": "128Mi"},
		"requests": map[string]any{"cpu": "10m", "memory": "64Mi"},
	})
	expect("nodeSelector", field(d.Object, "spec", "template", "spec", "nodeSelector"), map[string]any{"kubernetes.io/os": "linux"})
	expect("tolerations", field(d.Object, "spec", "template", "spec", "tolerations"), []any{map[string]any{
		"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}})
	expect("affinity arch", field(d.Object, "spec", "template", "spec", "affinity", "nodeAffinity",
		"requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"), []any{map[string]any{
		"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64"}}}}})
	// Helm merges a map value with the chart's default, so the chart's
	// restricted defaults stay unless set to null; the keys set must land.
	psc, _ := field(d.Object, "spec", "template", "spec", "securityContext").(map[string]any)
	expect("pod securityContext.fsGroup (podSecurityContext)", psc["fsGroup"], int64(2000))
	expect("pod securityContext.seccompProfile (podSecurityContext)", psc["seccompProfile"], map[string]any{"type": "RuntimeDefault"})
	csc, _ := field(c, "securityContext").(map[string]any)
	expect("container securityContext.runAsUser (containerSecurityContext)", csc["runAsUser"], int64(1234))
	expect("container securityContext.capabilities (containerSecurityContext)", csc["capabilities"], map[string]any{"drop": []any{"ALL"}})

	// controller.<flag>: one --flag=value each, and extraArgs after them;
	// the conversion webhook's flags come first, its Service name and
	// namespace always passed, as the reference chart does.
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	webhookArgs := []string{"--enable-webhook=true", "--webhook-service-name=my-webhook-service",
		"--webhook-namespace=" + refNamespace, "--webhook-port=9443", "--manage-webhook-certs=true"}
	if len(args) < len(webhookArgs) || !slices.Equal(args[:len(webhookArgs)], webhookArgs) {
		t.Errorf("controller args %v: want the webhook flags %v first", args, webhookArgs)
	} else {
		args = args[len(webhookArgs):]
	}
	wantArgs := []string{
		"--leader-elect=false", "--extensions=true", "--cluster-domain=corp.local", "--leader-election-namespace=agents-ref",
		"--enable-tracing=true", "--enable-pprof=true", "--enable-pprof-debug=true", "--pprof-block-profile-rate=2000000",
		"--pprof-mutex-profile-fraction=5", "--kube-api-qps=50.5", "--kube-api-burst=100", "--api-connections=4",
		"--separate-watch-connection=true", "--sandbox-concurrent-workers=200", "--cache-label-selectors=true",
		"--sandbox-write-behind-window=500ms", "--sandbox-claim-concurrent-workers=60", "--sandbox-warm-pool-concurrent-workers=2",
		"--sandbox-template-concurrent-workers=3", "--sandbox-warm-pool-max-batch-size=150", "--sandbox-warm-pool-replenish-delay=2s",
		"--sandbox-warm-pool-max-refill-rate=2.5", "--sandbox-warm-pool-readiness-grace-period=10m",
		"--sandbox-warm-pool-unschedulable-recheck-interval=2m", "--enable-warm-pool-eviction=false",
		"--disable-claim-events=true", "--disable-claim-observability-annotations=true",
		"--leader-election-identity=$(POD_NAME)_$(POD_UID)", // always, with its env below
	}
	for _, w := range wantArgs {
		if !slices.Contains(args, w) {
			t.Errorf("controller args lack %s: %v", w, args)
		}
	}
	if len(args) != len(wantArgs)+1 || args[len(args)-1] != "--zap-log-level=debug" {
		t.Errorf("controller args %v: want the %d flags, then controller.extraArgs last", args, len(wantArgs))
	}
	// The flags a controller build rejects would crash it: every rendered
	// flag must be one the binary defines.
	checkControllerAccepts(t, args)

	// webhookServiceName: the conversion webhook's Service, in namespace.name,
	// sending 443 to the controller's webhook port.
	whSvc := get(t, objs, "Service/"+refNamespace+"/my-webhook-service")
	if sel, _, _ := unstructured.NestedStringMap(whSvc.Object, "spec", "selector"); sel["app"] != "agent-sandbox-controller" {
		t.Errorf("webhook Service selects %v, want the controller Pods", sel)
	}
	// service.name: the metrics Service, selected by the ServiceMonitor and
	// named in the alert.
	svc := get(t, objs, "Service/"+refNamespace+"/my-controller-metrics")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || ports[0].(map[string]any)["name"] != "metrics" {
		t.Errorf("metrics Service ports %v", ports)
	}
	// metrics.serviceMonitor.*
	sm := get(t, objs, "ServiceMonitor/"+refNamespace+"/agent-sandbox")
	expect("ServiceMonitor label release (additionalLabels)", sm.GetLabels()["release"], "kube-prometheus-stack")
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", eps)
	}
	expect("ServiceMonitor interval", eps[0].(map[string]any)["interval"], "15s")
	expect("ServiceMonitor scrapeTimeout", eps[0].(map[string]any)["scrapeTimeout"], "10s")
	// metrics.prometheusRule.*
	pr := get(t, objs, "PrometheusRule/"+refNamespace+"/agent-sandbox")
	expect("PrometheusRule label release (additionalLabels)", pr.GetLabels()["release"], "kube-prometheus-stack")
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if len(groups) != 2 || groups[1].(map[string]any)["name"] != "my-extra.rules" {
		t.Fatalf("PrometheusRule groups %v: want the chart's, then additionalGroups", groups)
	}
	rules := groups[0].(map[string]any)["rules"].([]any)
	expr, _ := rules[0].(map[string]any)["expr"].(string)
	if !strings.Contains(expr, `service="my-controller-metrics"`) || !strings.Contains(expr, `namespace="agents-ref"`) {
		t.Errorf("alert expression %q does not name service.name and namespace.name", expr)
	}

	// The apiserver takes all of it. The Namespace must exist for the
	// namespaced objects' dry run (a dry-run create makes nothing).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: refNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crds := filepath.Join(t.TempDir(), "monitoring-crds.yaml")
	if err := os.WriteFile(crds, []byte(monitoringCRDs), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "--server-side", "-f", crds)
	kubectl(t, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")
	dryRunApply(t, "helm-reference-values", helmTemplate(t, "-f", file))
}

// checkControllerAccepts parses args with the controller's own flag set
// (`agent-sandbox-controller --help` lists them), so a value key that maps
// to a flag the binary does not define fails here, not in a crash loop.
func checkControllerAccepts(t *testing.T, args []string) {
	t.Helper()
	cmd := exec.Command("go", "run", "./cmd/agent-sandbox-controller", "--help")
	cmd.Dir = repo()
	out, _ := cmd.CombinedOutput() // the usage goes to stderr; the exit code varies with the flag package
	help := string(out)
	if !strings.Contains(help, "-leader-elect") {
		t.Fatalf("agent-sandbox-controller --help printed no flags:\n%s", help)
	}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.Contains(help, "-"+name+" ") && !strings.Contains(help, "-"+name+"\n") {
			t.Errorf("controller arg %s: the binary defines no flag -%s", a, name)
		}
	}
}

// TestHelmNullSecurityContexts: null drops the chart's restricted defaults,
// as in the reference chart (whose default is null).
func TestHelmNullSecurityContexts(t *testing.T) {
	objs := decode(t, helmTemplate(t, "--set", "podSecurityContext=null", "--set", "containerSecurityContext=null"))
	d := get(t, objs, "Deployment/"+Namespace+"/agent-sandbox-controller")
	if sc, found, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec", "securityContext"); found {
		t.Errorf("podSecurityContext=null still renders %v", sc)
	}
	if sc, found := container(t, d)["securityContext"]; found {
		t.Errorf("containerSecurityContext=null still renders %v", sc)
	}
}

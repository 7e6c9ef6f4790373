package install

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHelmWebhookValues: the webhook values map to the controller flags and
// objects: disabled means no Service, no port, --enable-webhook=false; a
// release namespace other than agent-sandbox-system is passed on, since the
// certificate names and the CRDs' clientConfig follow it.
func TestHelmWebhookValues(t *testing.T) {
	def := decode(t, helmTemplate(t, "--namespace", "other-ns", "--set", "webhookServiceName=my-webhook"))
	c := container(t, get(t, def, "Deployment/other-ns/agent-sandbox-controller"))
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, want := range []string{"--enable-webhook=true", "--webhook-service-name=my-webhook", "--webhook-namespace=other-ns",
		"--webhook-port=9443", "--manage-webhook-certs=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("default args %v lack %s", args, want)
		}
	}
	if !slices.Contains(keys(def), "Service/other-ns/my-webhook") || !slices.Contains(keys(def), "Role/other-ns/agent-sandbox-controller") {
		t.Errorf("webhook Service or Secret Role missing: %v", keys(def))
	}

	off := decode(t, helmTemplate(t, "--set", "webhook.enabled=false"))
	if args := controllerArgs(t, off); !slices.Contains(args, "--enable-webhook=false") || slices.Contains(args, "--webhook-port=9443") {
		t.Errorf("disabled webhook args = %v", args)
	}
	for _, k := range keys(off) {
		if k == "Service/agent-sandbox-system/agent-sandbox-webhook-service" || k == "Role/agent-sandbox-system/agent-sandbox-controller" {
			t.Errorf("disabled webhook still renders %s", k)
		}
	}
	checkPorts(t, container(t, get(t, off, "Deployment/agent-sandbox-system/agent-sandbox-controller")),
		map[string]int64{"metrics": 8080, "healthz": 8081})

	// --serve-v1alpha1 only when set: unset leaves the CRDs as installed.
	for _, a := range args {
		if strings.HasPrefix(a, "--serve-v1alpha1") {
			t.Errorf("default args pass %s", a)
		}
	}
	for _, set := range [][]string{{"webhook.serveV1alpha1=false"}, {"webhook.serveV1alpha1=false", "webhook.enabled=false"}} {
		var args []string
		for _, v := range set {
			args = append(args, "--set", v)
		}
		if got := controllerArgs(t, decode(t, helmTemplate(t, args...))); !slices.Contains(got, "--serve-v1alpha1=false") {
			t.Errorf("%v: args %v lack --serve-v1alpha1=false", set, got)
		}
	}

	external := decode(t, helmTemplate(t, "--set", "webhook.manageCerts=false"))
	if args := controllerArgs(t, external); !slices.Contains(args, "--manage-webhook-certs=false") {
		t.Errorf("args %v lack --manage-webhook-certs=false", args)
	}
	if slices.Contains(keys(external), "Role/agent-sandbox-system/agent-sandbox-controller") {
		t.Error("Secret Role rendered although the controller does not manage certificates")
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
	"sigs.k8s.io/agent-sandbox/internal/testenv/freeport"
	"sigs.k8s.io/agent-sandbox/internal/webhook"
)

// TestControllerServesConversionWebhook runs the controller's run() with
// its default webhook flags against a real apiserver: it creates the
// certificate Secret, patches the CA into a Webhook-strategy CRD, and
// serves /convert over TLS with a certificate for the webhook Service that
// chains to that CA. The manager keeps running until the test binary exits
// (run() owns the process's signal handler).
func TestControllerServesConversionWebhook(t *testing.T) {
	testenv.SkipShort(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhook.DefaultNamespace}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// envtest installs the CRDs with conversion None (its scheme serves no
	// webhook); put one back to what the manifests install.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, types.NamespacedName{Name: "sandboxes.agents.x-k8s.io"}, crd); err != nil {
		t.Fatal(err)
	}
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"}, ClientConfig: &apiextensionsv1.WebhookClientConfig{
			Service: &apiextensionsv1.ServiceReference{Name: "placeholder", Namespace: "default", Path: ptr.To("/convert")}}}}
	if err := env.Client.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}

	t.Setenv("KUBECONFIG", env.Kubeconfig)
	port := freeport.T(t) // bound by the webhook server a moment later
	errc := make(chan error, 1)
	go func() {
		errc <- run([]string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
			fmt.Sprintf("--webhook-port=%d", port), "--webhook-cert-dir=" + t.TempDir()})
	}()

	// exited reports the controller's end: every wait below fails at once
	// with its error instead of running into the deadline.
	exited := func() error {
		select {
		case err := <-errc:
			return fmt.Errorf("controller exited: %w", err)
		default:
			return nil
		}
	}
	secret := &corev1.Secret{}
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		return env.Client.Get(ctx, types.NamespacedName{Namespace: webhook.DefaultNamespace, Name: webhook.DefaultSecretName}, secret) == nil, nil
	}); err != nil {
		t.Fatalf("webhook Secret: %v", err)
	}
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, types.NamespacedName{Name: crd.Name}, cur); err != nil {
			return false, err
		}
		cc := cur.Spec.Conversion.Webhook.ClientConfig
		return bytes.Equal(cc.CABundle, secret.Data[webhook.KeyCACert]) && cc.Service.Name == webhook.DefaultServiceName &&
			cc.Service.Namespace == webhook.DefaultNamespace, nil
	}); err != nil {
		t.Fatalf("CRD caBundle/service not patched: %v", err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data[webhook.KeyCACert])
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: webhook.DefaultServiceName + "." + webhook.DefaultNamespace + ".svc", MinVersion: tls.VersionTLS12}}}
	review := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{UID: "1", DesiredAPIVersion: "agents.x-k8s.io/v1alpha1", Objects: []runtime.RawExtension{{
			Raw: []byte(`{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"Sandbox","metadata":{"name":"s","namespace":"n"},"spec":{"operatingMode":"Suspended","podTemplate":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}`)}}},
	}
	body, _ := json.Marshal(review)
	var (
		resp    *http.Response
		postErr error
	)
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, err
		}
		resp, postErr = hc.Post(fmt.Sprintf("https://127.0.0.1:%d/convert", port), "application/json", bytes.NewReader(body))
		return postErr == nil, nil
	}); err != nil {
		t.Fatalf("webhook not serving on port %d: %v (last attempt: %v)", port, err, postErr)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 1 {
		t.Errorf("webhook spoke HTTP/%d, want HTTP/1.1 only", resp.ProtoMajor)
	}
	var out apiextensionsv1.ConversionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil || len(out.Response.ConvertedObjects) != 1 {
		t.Fatalf("conversion response: %v %+v", err, out.Response)
	}
	if got := string(out.Response.ConvertedObjects[0].Raw); !strings.Contains(got, `"replicas":0`) {
		t.Fatalf("converted = %s, want replicas 0", got)
	}
}

package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// BenchmarkConvertHandlerSandbox is the controller's share of one call the
// apiserver makes for its v1alpha1 watch cache: a ConversionReview of one
// pool Sandbox to v1alpha1 through the same handler /convert serves (JSON
// in, conversion, JSON out; no TLS). Run with -short so TestMain starts no
// apiserver:
//
//	go test -short -run '^$' -bench ConvertHandler ./internal/webhook/
func BenchmarkConvertHandlerSandbox(b *testing.B) {
	sb := &sandboxv1beta1.Sandbox{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: "runc-pool-abcde", Namespace: "refill-bench", UID: types.UID("0b6c2a1e-1111-2222-3333-444455556666"),
			Labels: map[string]string{"agents.x-k8s.io/warm-pool-sandbox": "3ae31f40", "app": "refill-bench"}},
	}
	sb.Spec.OperatingMode = sandboxv1beta1.OperatingModeRunning
	sb.Spec.PodTemplate.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "runtime", Image: "localhost/agent-sandbox/python-runtime:dev",
		Ports: []corev1.ContainerPort{{Name: "runtime", ContainerPort: 8888}}}}}
	raw, err := json.Marshal(sb)
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{UID: "bench", DesiredAPIVersion: "agents.x-k8s.io/" + DeprecatedVersion,
			Objects: []runtime.RawExtension{{Raw: raw}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	// The hub and spokes convert through their Convertible methods, as
	// Setup registers them: an empty registry.
	h := conversion.NewWebhookHandler(scheme, conversion.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, convertPath, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"status":"Success"`)) {
			b.Fatalf("%d %s", w.Code, w.Body.String())
		}
	}
}

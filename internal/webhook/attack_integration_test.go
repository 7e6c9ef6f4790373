package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func directClient(t *testing.T) *http.Client {
	t.Helper()
	testenv.SkipShort(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(servingCA) {
		t.Fatal("no serving CA")
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// TestConvertEndpointUnauthenticatedCaller performs the attack: any pod can
// reach /convert (no client certificates, as in the reference). Garbage and
// oversized bodies get an error, never a crash, and a well-formed review
// returns only the converted input: the handler reads nothing from the
// cluster, so there is nothing to exfiltrate.
func TestConvertEndpointUnauthenticatedCaller(t *testing.T) {
	hc := directClient(t)
	for name, body := range map[string][]byte{
		"garbage":  []byte("{{{"),
		"wrong":    []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"1","desiredAPIVersion":"nope/v9","objects":[{"apiVersion":"agents.x-k8s.io/v1alpha1","kind":"Sandbox"}]}}`),
		"oversize": bytes.Repeat([]byte("a"), 8<<20),
	} {
		resp, err := hc.Post(convertURL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var review apiextensionsv1.ConversionReview
		ok := resp.StatusCode >= 400 || (json.Unmarshal(data, &review) == nil && review.Response != nil && review.Response.Result.Status == metav1.StatusFailure)
		if !ok {
			t.Fatalf("%s: status %d body %.200s, want an error", name, resp.StatusCode, data)
		}
	}
	// Still serving, and a real review converts exactly what was sent.
	obj := `{"apiVersion":"agents.x-k8s.io/v1alpha1","kind":"Sandbox","metadata":{"name":"x","namespace":"ns"},"spec":{"replicas":0,"podTemplate":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}`
	req := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: "2", DesiredAPIVersion: "agents.x-k8s.io/v1beta1", Objects: []runtime.RawExtension{{Raw: []byte(obj)}}},
	}
	raw, _ := json.Marshal(req)
	resp, err := hc.Post(convertURL, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil || len(review.Response.ConvertedObjects) != 1 {
		t.Fatalf("real review: %v %+v", err, review.Response)
	}
	got := string(review.Response.ConvertedObjects[0].Raw)
	if !strings.Contains(got, `"operatingMode":"Suspended"`) || !strings.Contains(got, `"name":"x"`) {
		t.Fatalf("converted object = %s", got)
	}
}

// TestCertManagerReplacesForeignServingCert performs the attack of a Secret
// whose serving certificate was not issued by its CA, or names another
// Service: it is never served; the manager issues a certificate for the
// webhook Service from the Secret's CA instead.
func TestCertManagerReplacesForeignServingCert(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	now := time.Now()
	ca, err := newCA(now, DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newCA(now, DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		issuer *keyPair
		names  []string
	}{
		{"signed by another CA", other, DNSNames(DefaultServiceName, ns, "cluster.local")},
		{"for another Service", ca, DNSNames("evil-service", ns, "cluster.local")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			foreign, err := newServing(tc.issuer, tc.names, now, DefaultValidity)
			if err != nil {
				t.Fatal(err)
			}
			s := &corev1.Secret{}
			s.Namespace, s.Name = ns, DefaultSecretName
			_ = k8s.Delete(testCtx(t), s)
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultSecretName}, Data: secretData(ca, ca.certPEM, foreign)}
			if err := k8s.Create(testCtx(t), s); err != nil {
				t.Fatal(err)
			}
			m := newCertManager(t, ns, nil)
			if err := m.Ensure(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			served, err := m.currentLeaf()
			if err != nil {
				t.Fatal(err)
			}
			if served.Equal(foreign.cert) {
				t.Fatal("foreign serving certificate is served")
			}
			if !servingOK(served, ca.cert, DNSNames(DefaultServiceName, ns, "cluster.local"), now, time.Hour) {
				t.Fatalf("served certificate %v is not the Service's from the Secret's CA", served.DNSNames)
			}
		})
	}
}

package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

const (
	widgetCRD = "widgets.webhooktest.agents.x-k8s.io" // conversion: Webhook
	gadgetCRD = "gadgets.webhooktest.agents.x-k8s.io" // conversion: None
)

// clock is a test clock the certificate manager reads.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newCertManager(t *testing.T, ns string, clk *clock) *CertManager {
	t.Helper()
	m := &CertManager{
		Client:        k8s,
		Namespace:     ns,
		ServiceName:   DefaultServiceName,
		ClusterDomain: "cluster.local",
		CertDir:       t.TempDir(),
		CRDNames:      []string{widgetCRD, gadgetCRD, "missing.webhooktest.agents.x-k8s.io"},
	}
	if clk != nil {
		m.Now = clk.Now
		m.Validity = 10 * time.Hour
		m.RenewBefore = 3 * time.Hour
	}
	return m
}

func getSecret(t *testing.T, ns string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: DefaultSecretName}, s); err != nil {
		t.Fatalf("reading webhook Secret: %v", err)
	}
	return s
}

func getCRD(t *testing.T, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8s.Get(testCtx(t), types.NamespacedName{Name: name}, crd); err != nil {
		t.Fatalf("reading CRD %s: %v", name, err)
	}
	return crd
}

func leaf(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	certs, err := parseCerts(pemData)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// TestCertManagerCreatesSecretAndPatchesCRDs: with no Secret, Ensure creates
// the CA and serving certificate, serves it, writes the files and patches
// the CA into the Webhook-strategy CRD only.
func TestCertManagerCreatesSecretAndPatchesCRDs(t *testing.T) {
	ns := newNamespace(t)
	m := newCertManager(t, ns, nil)
	gadgetBefore := getCRD(t, gadgetCRD)
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	s := getSecret(t, ns)
	for _, k := range []string{KeyCACert, KeyCAKey, KeyServeCert, KeyServeKey} {
		if len(s.Data[k]) == 0 {
			t.Fatalf("secret key %s empty", k)
		}
	}
	if s.Type != corev1.SecretTypeOpaque {
		t.Fatalf("secret type %q, want Opaque", s.Type)
	}
	ca, serving := leaf(t, s.Data[KeyCACert]), leaf(t, s.Data[KeyServeCert])
	if !ca.IsCA || ca.Subject.CommonName != CACommonName {
		t.Fatalf("CA: IsCA=%v CN=%q", ca.IsCA, ca.Subject.CommonName)
	}
	want := DNSNames(DefaultServiceName, ns, "cluster.local")
	if !servingOK(serving, ca, want, time.Now(), 0) {
		t.Fatalf("serving certificate %v does not chain to the CA for %v", serving.DNSNames, want)
	}
	if serving.Subject.CommonName != DefaultServiceName+"."+ns+".svc" {
		t.Fatalf("serving CN = %q", serving.Subject.CommonName)
	}
	got, err := m.currentLeaf()
	if err != nil || !got.Equal(serving) {
		t.Fatalf("served certificate is not the Secret's: %v", err)
	}
	for _, k := range []string{KeyServeCert, KeyServeKey} {
		fi, err := os.Stat(filepath.Join(m.CertDir, k))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v, want 0600", k, err, fi.Mode())
		}
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(m.CertDir, KeyServeCert), filepath.Join(m.CertDir, KeyServeKey)); err != nil {
		t.Fatalf("written files do not load: %v", err)
	}

	cc := getCRD(t, widgetCRD).Spec.Conversion.Webhook
	if !bytes.Equal(cc.ClientConfig.CABundle, s.Data[KeyCACert]) {
		t.Fatal("CRD caBundle is not the Secret's CA")
	}
	if svc := cc.ClientConfig.Service; svc.Name != DefaultServiceName || svc.Namespace != ns || *svc.Path != "/convert" {
		t.Fatalf("CRD service = %+v", svc)
	}
	if len(cc.ConversionReviewVersions) != 1 || cc.ConversionReviewVersions[0] != "v1" {
		t.Fatalf("conversionReviewVersions = %v, want the CRD's own [v1] kept", cc.ConversionReviewVersions)
	}
	if after := getCRD(t, gadgetCRD); after.ResourceVersion != gadgetBefore.ResourceVersion {
		t.Fatal("CRD with conversion strategy None was patched")
	}

	// A second replica (or a restart) loads the same Secret and changes
	// nothing.
	m2 := newCertManager(t, ns, nil)
	if err := m2.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if again := getSecret(t, ns); again.ResourceVersion != s.ResourceVersion {
		t.Fatal("second Ensure rewrote a good Secret")
	}
	if got, _ := m2.currentLeaf(); !got.Equal(serving) {
		t.Fatal("second replica serves a different certificate")
	}
}

// TestCertManagerRenewsBeforeExpiry moves the clock: the serving certificate
// is renewed inside the renewal window with the same CA; near the CA's
// expiry a new CA is made and the bundle keeps the old one.
func TestCertManagerRenewsBeforeExpiry(t *testing.T) {
	ns := newNamespace(t)
	clk := &clock{now: time.Now()}
	m := newCertManager(t, ns, clk)
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	first := getSecret(t, ns)
	firstServing, firstCA := leaf(t, first.Data[KeyServeCert]), leaf(t, first.Data[KeyCACert])

	clk.Add(2 * time.Hour) // 8h left: outside the 3h window
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if s := getSecret(t, ns); s.ResourceVersion != first.ResourceVersion {
		t.Fatal("renewed a certificate outside the renewal window")
	}

	clk.Add(5 * time.Hour) // 3h left: inside the window
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second := getSecret(t, ns)
	secondServing := leaf(t, second.Data[KeyServeCert])
	if secondServing.Equal(firstServing) {
		t.Fatal("serving certificate not renewed inside the renewal window")
	}
	if !secondServing.NotAfter.After(firstServing.NotAfter) {
		t.Fatalf("renewed certificate expires %v, not after %v", secondServing.NotAfter, firstServing.NotAfter)
	}
	// The CA expires together with the first certificate, so it was
	// rotated too; the bundle must still hold the old CA.
	cas, err := parseCerts(second.Data[KeyCACert])
	if err != nil {
		t.Fatal(err)
	}
	if len(cas) != 2 || cas[0].Equal(firstCA) || !cas[1].Equal(firstCA) {
		t.Fatalf("CA bundle has %d certs; want new CA first, then the old one", len(cas))
	}
	if got, _ := m.currentLeaf(); !got.Equal(secondServing) {
		t.Fatal("renewed certificate not served")
	}
	if cc := getCRD(t, widgetCRD).Spec.Conversion.Webhook.ClientConfig; !bytes.Equal(cc.CABundle, second.Data[KeyCACert]) {
		t.Fatal("CRD caBundle not updated with the rotated bundle")
	}
	// The new serving certificate verifies against the bundle the
	// apiserver now trusts.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(second.Data[KeyCACert])
	if _, err := secondServing.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: clk.Now(), DNSName: DefaultServiceName + "." + ns + ".svc"}); err != nil {
		t.Fatalf("renewed certificate does not verify against the CRD bundle: %v", err)
	}

	// Once the old CA has expired it is pruned at the next renewal.
	clk.Add(9 * time.Hour)
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if cas, _ := parseCerts(getSecret(t, ns).Data[KeyCACert]); len(cas) > 2 || cas[len(cas)-1].Equal(firstCA) {
		t.Fatalf("expired CA kept in the bundle (%d certs)", len(cas))
	}
}

// TestCertManagerServingRenewalKeepsCA: a serving certificate close to
// expiry under a long-lived CA is renewed without touching the CA or the
// CRD bundle.
func TestCertManagerServingRenewalKeepsCA(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	now := time.Now()
	ca, err := newCA(now, 100*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := newServing(ca, DNSNames(DefaultServiceName, ns, "cluster.local"), now, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultSecretName}, Data: secretData(ca, ca.certPEM, serving)}
	if err := k8s.Create(testCtx(t), s); err != nil {
		t.Fatal(err)
	}
	m := newCertManager(t, ns, &clock{now: now})
	m.Validity = 100 * time.Hour
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	after := getSecret(t, ns)
	if !bytes.Equal(after.Data[KeyCACert], ca.certPEM) {
		t.Fatal("CA changed although it had 100h left")
	}
	if leaf(t, after.Data[KeyServeCert]).Equal(serving.cert) {
		t.Fatal("serving certificate with 2h left not renewed (window 3h)")
	}
}

// TestCertManagerInvalidPEM: a Secret whose PEM does not decode is an error
// and is left as it is (nothing the operator put there is lost).
func TestCertManagerInvalidPEM(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultSecretName},
		Data: map[string][]byte{KeyCACert: []byte("garbage"), KeyServeCert: []byte("garbage"), KeyServeKey: []byte("garbage")}}
	if err := k8s.Create(testCtx(t), s); err != nil {
		t.Fatal(err)
	}
	m := newCertManager(t, ns, nil)
	if err := m.Ensure(testCtx(t)); err == nil {
		t.Fatal("Ensure accepted a Secret with invalid PEM")
	}
	if after := getSecret(t, ns); after.ResourceVersion != s.ResourceVersion {
		t.Fatal("invalid Secret was overwritten")
	}
	if m.Ready() {
		t.Fatal("ready without a certificate")
	}
}

// TestCertManagerReferenceSecret: a Secret written by the reference
// implementation (no ca.key) is used as it is while valid.
func TestCertManagerReferenceSecret(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	now := time.Now()
	ca, err := newCA(now, DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := newServing(ca, DNSNames(DefaultServiceName, ns, "cluster.local"), now, DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultSecretName},
		Data: map[string][]byte{KeyCACert: ca.certPEM, KeyServeCert: serving.certPEM, KeyServeKey: serving.keyPEM}}
	if err := k8s.Create(testCtx(t), s); err != nil {
		t.Fatal(err)
	}
	m := newCertManager(t, ns, nil)
	if err := m.Ensure(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if after := getSecret(t, ns); after.ResourceVersion != s.ResourceVersion {
		t.Fatal("valid reference Secret rewritten")
	}
	if got, _ := m.currentLeaf(); !got.Equal(serving.cert) {
		t.Fatal("not serving the reference Secret's certificate")
	}
}

// TestCertManagerReplicasRace: replicas starting together agree on one
// Secret (create races resolve through AlreadyExists, renewals through
// optimistic locking).
func TestCertManagerReplicasRace(t *testing.T) {
	ns := newNamespace(t)
	const n = 4
	ms := make([]*CertManager, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ms[i] = newCertManager(t, ns, nil)
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = ms[i].Ensure(testCtx(t)) }()
	}
	wg.Wait()
	want := leaf(t, getSecret(t, ns).Data[KeyServeCert])
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if got, _ := ms[i].currentLeaf(); !got.Equal(want) {
			t.Fatalf("replica %d serves a certificate that is not the Secret's", i)
		}
	}
}

// TestCertManagerLoopRestoresCABundle: a CRD re-applied without its
// caBundle (the periodic check runs every CheckInterval) is patched again.
func TestCertManagerLoopRestoresCABundle(t *testing.T) {
	testenv.SkipShort(t)
	ns := newNamespace(t)
	m := newCertManager(t, ns, nil)
	m.CheckInterval = 100 * time.Millisecond
	ctx := testCtx(t)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Start(loopCtx) }()
	defer func() { stop(); <-done }() //nolint:errcheck // shutdown; its result is not under test

	crd := getCRD(t, widgetCRD)
	crd.Spec.Conversion.Webhook.ClientConfig.CABundle = nil
	if err := k8s.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
	want := getSecret(t, ns).Data[KeyCACert]
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return bytes.Equal(getCRD(t, widgetCRD).Spec.Conversion.Webhook.ClientConfig.CABundle, want), nil
	}); err != nil {
		t.Fatalf("caBundle not restored by the periodic check: %v", err)
	}
}

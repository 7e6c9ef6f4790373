package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;patch;update,resourceNames=sandboxes.agents.x-k8s.io;sandboxclaims.extensions.agents.x-k8s.io;sandboxtemplates.extensions.agents.x-k8s.io;sandboxwarmpools.extensions.agents.x-k8s.io

// Defaults of the managed certificates.
const (
	DefaultSecretName  = "agent-sandbox-webhook-certs"
	DefaultServiceName = "agent-sandbox-webhook-service"
	DefaultNamespace   = "agent-sandbox-system"
	// DefaultValidity is how long a generated CA or serving certificate is
	// valid.
	DefaultValidity = 365 * 24 * time.Hour
	// DefaultRenewBefore renews a certificate this long before it expires,
	// leaving every replica many check intervals to pick up the new one.
	DefaultRenewBefore = 30 * 24 * time.Hour
	// DefaultCheckInterval is how often the Secret is re-read, the
	// certificates checked and the CRDs' caBundle verified: five GETs per
	// replica per minute, and a CRD re-applied without its caBundle (e.g.
	// `kubectl replace`) converts again within a minute.
	DefaultCheckInterval = time.Minute
)

// Secret keys. ca.crt, tls.crt and tls.key are the reference's; ca.key is
// ours and lets a serving certificate be renewed without changing the CA.
const (
	KeyCACert     = "ca.crt"
	KeyCAKey      = "ca.key"
	KeyServeCert  = corev1.TLSCertKey
	KeyServeKey   = corev1.TLSPrivateKeyKey
	convertPath   = "/convert"
	fileMode      = 0o600
	maxEnsureRuns = 5
)

// CRDNames are the CRDs whose conversion webhook this controller serves.
var CRDNames = []string{
	"sandboxes.agents.x-k8s.io",
	"sandboxclaims.extensions.agents.x-k8s.io",
	"sandboxtemplates.extensions.agents.x-k8s.io",
	"sandboxwarmpools.extensions.agents.x-k8s.io",
}

// CertManager keeps the webhook's CA and serving certificate in a Secret,
// serves the current certificate to the TLS server and patches the CA into
// the CRDs.
type CertManager struct {
	// Client reads and writes the Secret and the CRDs directly (no cache:
	// the controller needs no Secret informer, and RBAC grants only this
	// one Secret by name).
	Client        client.Client
	Namespace     string
	SecretName    string
	ServiceName   string
	ClusterDomain string
	// CertDir receives tls.crt and tls.key (mode 0600) for anything that
	// reads the files; the server itself is fed from memory. Empty skips it.
	CertDir       string
	CRDNames      []string
	Validity      time.Duration
	RenewBefore   time.Duration
	CheckInterval time.Duration
	// Now is the clock (tests move it).
	Now func() time.Time

	current atomic.Pointer[tls.Certificate]
}

func (m *CertManager) defaults() {
	if m.SecretName == "" {
		m.SecretName = DefaultSecretName
	}
	if m.ServiceName == "" {
		m.ServiceName = DefaultServiceName
	}
	if m.Namespace == "" {
		m.Namespace = DefaultNamespace
	}
	if m.CRDNames == nil {
		m.CRDNames = CRDNames
	}
	if m.Validity <= 0 {
		m.Validity = DefaultValidity
	}
	if m.RenewBefore <= 0 || m.RenewBefore >= m.Validity {
		m.RenewBefore = min(DefaultRenewBefore, m.Validity/3)
	}
	if m.CheckInterval <= 0 {
		m.CheckInterval = DefaultCheckInterval
	}
	if m.Now == nil {
		m.Now = time.Now
	}
}

// GetCertificate serves the current certificate; plug it into tls.Config.
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.current.Load()
	if c == nil {
		return nil, errors.New("webhook serving certificate not ready")
	}
	return c, nil
}

// Ready reports whether a serving certificate is loaded.
func (m *CertManager) Ready() bool { return m.current.Load() != nil }

// NeedLeaderElection is false: every replica serves conversions.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start re-checks the certificates every CheckInterval until ctx ends. A
// failed check is logged and retried at the next tick; the certificate in
// use stays valid for RenewBefore, far longer than a tick.
func (m *CertManager) Start(ctx context.Context) error {
	m.defaults()
	log := logf.FromContext(ctx).WithName("webhook-certs")
	t := time.NewTicker(m.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := m.Ensure(ctx); err != nil {
				log.Error(err, "checking webhook certificates")
			}
		}
	}
}

// Ensure makes the Secret hold a CA and a serving certificate valid for at
// least RenewBefore, loads the serving certificate, writes the files and
// patches the CA bundle into the CRDs. It is idempotent and safe to run from
// several replicas at once.
func (m *CertManager) Ensure(ctx context.Context) error {
	m.defaults()
	var (
		s   *corev1.Secret
		err error
	)
	for range maxEnsureRuns {
		s, err = m.ensureSecret(ctx)
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			break
		}
		// Another replica wrote the Secret first: start over from its copy.
	}
	if err != nil {
		return err
	}
	cert, err := tlsCertificate(s.Data[KeyServeCert], s.Data[KeyServeKey])
	if err != nil {
		return fmt.Errorf("secret %s/%s: %w", m.Namespace, m.SecretName, err)
	}
	m.current.Store(cert)
	if err := m.writeFiles(s); err != nil {
		return err
	}
	return m.patchCRDs(ctx, s.Data[KeyCACert])
}

// ensureSecret returns a Secret whose certificates are good, creating or
// renewing it as needed.
func (m *CertManager) ensureSecret(ctx context.Context) (*corev1.Secret, error) {
	now := m.Now()
	names := DNSNames(m.ServiceName, m.Namespace, m.ClusterDomain)
	s := &corev1.Secret{}
	err := m.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.SecretName}, s)
	if apierrors.IsNotFound(err) {
		ca, err := newCA(now, m.Validity)
		if err != nil {
			return nil, err
		}
		serving, err := newServing(ca, names, now, m.Validity)
		if err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName},
			Type:       corev1.SecretTypeOpaque,
			Data:       secretData(ca, bundle(ca.cert, nil, now), serving),
		}
		if err := m.Client.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("creating secret %s/%s: %w", m.Namespace, m.SecretName, err)
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", m.Namespace, m.SecretName, err)
	}

	// Only PEM that does not decode is an error: the Secret is what the
	// apiserver trusts, and guessing would hide a broken install.
	cas, err := parseCerts(s.Data[KeyCACert])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s key %s: %w", m.Namespace, m.SecretName, KeyCACert, err)
	}
	servingCerts, err := parseCerts(s.Data[KeyServeCert])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s key %s: %w", m.Namespace, m.SecretName, KeyServeCert, err)
	}
	if _, err := parseKey(s.Data[KeyServeKey]); err != nil {
		return nil, fmt.Errorf("secret %s/%s key %s: %w", m.Namespace, m.SecretName, KeyServeKey, err)
	}
	_, pairErr := tlsCertificate(s.Data[KeyServeCert], s.Data[KeyServeKey])

	// The CA can sign renewals only if its key is here (a Secret written by
	// the reference implementation has none) and it lives long enough.
	var ca *keyPair
	if k, err := parseKey(s.Data[KeyCAKey]); err == nil && !now.Add(m.RenewBefore).After(cas[0].NotAfter) {
		ca = &keyPair{cert: cas[0], key: k, certPEM: s.Data[KeyCACert], keyPEM: s.Data[KeyCAKey]}
	}
	caValid := !now.Add(m.RenewBefore).After(cas[0].NotAfter)
	if pairErr == nil && caValid && servingOK(servingCerts[0], cas[0], names, now, m.RenewBefore) {
		return s, nil
	}
	log := logf.FromContext(ctx).WithName("webhook-certs")
	if ca == nil {
		if ca, err = newCA(now, m.Validity); err != nil {
			return nil, err
		}
		log.Info("rotating webhook CA", "secret", m.SecretName, "previousNotAfter", cas[0].NotAfter)
	}
	serving, err := newServing(ca, names, now, m.Validity)
	if err != nil {
		return nil, err
	}
	log.Info("renewing webhook serving certificate", "secret", m.SecretName, "previousNotAfter", servingCerts[0].NotAfter, "notAfter", serving.cert.NotAfter)
	s.Data = secretData(ca, bundle(ca.cert, cas, now), serving)
	// Update carries the resourceVersion just read: a replica that lost
	// the race gets a conflict and adopts the winner's certificates.
	if err := m.Client.Update(ctx, s); err != nil {
		return nil, fmt.Errorf("updating secret %s/%s: %w", m.Namespace, m.SecretName, err)
	}
	return s, nil
}

func secretData(ca *keyPair, caBundle []byte, serving *keyPair) map[string][]byte {
	return map[string][]byte{
		KeyCACert:    caBundle,
		KeyCAKey:     ca.keyPEM,
		KeyServeCert: serving.certPEM,
		KeyServeKey:  serving.keyPEM,
	}
}

// writeFiles writes tls.crt and tls.key to CertDir when they changed.
func (m *CertManager) writeFiles(s *corev1.Secret) error {
	if m.CertDir == "" {
		return nil
	}
	if err := os.MkdirAll(m.CertDir, 0o700); err != nil {
		return fmt.Errorf("creating cert dir: %w", err)
	}
	for _, k := range []string{KeyServeCert, KeyServeKey} {
		path := filepath.Join(m.CertDir, k)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, s.Data[k]) {
			continue
		}
		// Write then rename so a reader never sees half a file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, s.Data[k], fileMode); err != nil {
			return fmt.Errorf("writing %s: %w", tmp, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("installing %s: %w", path, err)
		}
	}
	return nil
}

// patchCRDs points each CRD's conversion webhook at the Service and sets the
// CA bundle. Missing CRDs (e.g. a core-only install) and CRDs that do not
// convert through a webhook are left alone.
func (m *CertManager) patchCRDs(ctx context.Context, caBundle []byte) error {
	return forEachCRD(ctx, m.Client, m.CRDNames, func(crd *apiextensionsv1.CustomResourceDefinition) error {
		conv := crd.Spec.Conversion
		if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter {
			return nil
		}
		if upToDate(conv, m.ServiceName, m.Namespace, caBundle) {
			return nil
		}
		versions := []string{"v1", "v1beta1"}
		if conv.Webhook != nil && len(conv.Webhook.ConversionReviewVersions) > 0 {
			versions = conv.Webhook.ConversionReviewVersions
		}
		patch := map[string]any{"spec": map[string]any{"conversion": map[string]any{
			"webhook": map[string]any{
				"conversionReviewVersions": versions,
				"clientConfig": map[string]any{
					"url":      nil,
					"caBundle": caBundle,
					"service":  map[string]any{"name": m.ServiceName, "namespace": m.Namespace, "path": convertPath},
				},
			},
		}}}
		raw, err := json.Marshal(patch)
		if err != nil {
			return fmt.Errorf("encoding CRD patch: %w", err)
		}
		if err := m.Client.Patch(ctx, crd, client.RawPatch(types.MergePatchType, raw)); err != nil {
			return fmt.Errorf("patching CRD %s: %w", crd.Name, err)
		}
		return nil
	})
}

// forEachCRD reads each named CRD and calls fn with it, skipping CRDs that
// do not exist (a core-only install); errors are joined, so one CRD's
// failure does not keep the others from being handled.
func forEachCRD(ctx context.Context, c client.Client, names []string, fn func(*apiextensionsv1.CustomResourceDefinition) error) error {
	var errs []error
	for _, name := range names {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("reading CRD %s: %w", name, err))
			}
			continue
		}
		if err := fn(crd); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func upToDate(conv *apiextensionsv1.CustomResourceConversion, service, namespace string, caBundle []byte) bool {
	if conv.Webhook == nil || conv.Webhook.ClientConfig == nil || conv.Webhook.ClientConfig.Service == nil {
		return false
	}
	cc := conv.Webhook.ClientConfig
	return len(conv.Webhook.ConversionReviewVersions) > 0 && cc.URL == nil &&
		cc.Service.Name == service && cc.Service.Namespace == namespace &&
		cc.Service.Path != nil && *cc.Service.Path == convertPath && bytes.Equal(cc.CABundle, caBundle)
}

// currentLeaf is the parsed serving certificate in use (tests).
func (m *CertManager) currentLeaf() (*x509.Certificate, error) {
	c := m.current.Load()
	if c == nil || len(c.Certificate) == 0 {
		return nil, errors.New("no certificate loaded")
	}
	return x509.ParseCertificate(c.Certificate[0])
}

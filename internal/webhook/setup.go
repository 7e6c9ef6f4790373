package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Defaults of the webhook flags.
const (
	DefaultPort     = 9443
	DefaultCertName = "tls.crt"
	DefaultKeyName  = "tls.key"
	// CombinedCertName is a single PEM file holding certificate and key,
	// used when neither default file exists.
	CombinedCertName = "cert.pem"
)

// DefaultCertDir is controller-runtime's default serving-certs directory.
func DefaultCertDir() string {
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

// Options are the webhook flags of the controller.
type Options struct {
	Enable        bool
	Port          int
	CertDir       string
	CertName      string
	KeyName       string
	ManageCerts   bool
	ServiceName   string
	Namespace     string
	ClusterDomain string
}

// Validate checks the flag values.
func (o Options) Validate() error {
	switch {
	case !o.Enable:
		return nil
	case o.Port <= 0 || o.Port > 65535:
		return fmt.Errorf("--webhook-port must be in 1..65535, got %d", o.Port)
	case o.CertName == "" || o.KeyName == "":
		return errors.New("--webhook-cert-name and --webhook-key-name must not be empty")
	case o.ServiceName == "" || o.Namespace == "":
		return errors.New("--webhook-service-name and --webhook-namespace must not be empty")
	}
	return nil
}

// NewCertManager returns the certificate manager for o, with its own
// uncached client.
func NewCertManager(cfg *rest.Config, scheme *runtime.Scheme, o Options) (*CertManager, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating webhook certificate client: %w", err)
	}
	return &CertManager{
		Client:        c,
		Namespace:     o.Namespace,
		SecretName:    DefaultSecretName,
		ServiceName:   o.ServiceName,
		ClusterDomain: o.ClusterDomain,
		CertDir:       o.CertDir,
	}, nil
}

// ResolveCertFiles returns the certificate and key file names in dir: the
// configured ones, or the combined cert.pem when the defaults were kept and
// neither default file exists (some provisioners write a single PEM).
func ResolveCertFiles(dir, certName, keyName string) (string, string) {
	if certName != DefaultCertName || keyName != DefaultKeyName {
		return certName, keyName
	}
	if exists(filepath.Join(dir, certName)) || exists(filepath.Join(dir, keyName)) {
		return certName, keyName
	}
	if exists(filepath.Join(dir, CombinedCertName)) {
		return CombinedCertName, CombinedCertName
	}
	return certName, keyName
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// NewServer returns the webhook server: TLS 1.2+, no client certificates,
// HTTP/1.1 only (HTTP/2 stream floods, CVE-2023-44487, cannot reach it).
// With a CertManager the certificate comes from memory; otherwise from the
// files in CertDir, reloaded when they change.
func NewServer(o Options, cm *CertManager) ctrlwebhook.Server {
	opts := ctrlwebhook.Options{
		Port:    o.Port,
		CertDir: o.CertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			c.ClientAuth = tls.NoClientCert
			c.NextProtos = []string{"http/1.1"}
		}},
	}
	if cm != nil {
		opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.GetCertificate = cm.GetCertificate })
	} else {
		opts.CertName, opts.KeyName = ResolveCertFiles(o.CertDir, o.CertName, o.KeyName)
	}
	return ctrlwebhook.NewServer(opts)
}

// Setup registers the conversion webhooks of the four kinds on the
// manager's webhook server and, with a CertManager, provisions the
// certificates now (the server must have one before it starts) and keeps
// renewing them. The manager's scheme must hold both API versions.
func Setup(ctx context.Context, mgr ctrl.Manager, cm *CertManager) error {
	if cm != nil {
		// The apiserver may be briefly unreachable while the pod starts;
		// retry for a while before giving up (and being restarted).
		var err error
		_ = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if err = cm.Ensure(ctx); err != nil {
				ctrl.Log.WithName("webhook-certs").Info("provisioning webhook certificates, retrying", "error", err.Error())
			}
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("provisioning webhook certificates: %w", err)
		}
		if err := mgr.Add(cm); err != nil {
			return fmt.Errorf("adding webhook certificate manager: %w", err)
		}
		if err := mgr.AddReadyzCheck("webhook-certs", func(*http.Request) error {
			if !cm.Ready() {
				return errors.New("no webhook serving certificate")
			}
			return nil
		}); err != nil {
			return fmt.Errorf("adding webhook ready check: %w", err)
		}
	}
	// No defaulter or validator: only /convert is served.
	for _, err := range []error{
		ctrl.NewWebhookManagedBy(mgr, &sandboxv1beta1.Sandbox{}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &extv1beta1.SandboxTemplate{}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &extv1beta1.SandboxWarmPool{}).Complete(),
		ctrl.NewWebhookManagedBy(mgr, &extv1beta1.SandboxClaim{}).Complete(),
	} {
		if err != nil {
			return fmt.Errorf("registering conversion webhook: %w", err)
		}
	}
	return nil
}

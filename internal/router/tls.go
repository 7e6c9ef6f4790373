package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// mTLS modes (--mtls-mode).
const (
	MTLSOff      = "off"
	MTLSOptional = "optional"
	MTLSRequired = "required"
)

// certReloadDebounce coalesces the burst of events one certificate rotation
// produces (two files, or an AtomicWriter's rename dance).
const certReloadDebounce = 250 * time.Millisecond

// CertReloader serves the current certificate and reloads it when the files
// change. A failed reload keeps the previous certificate.
type CertReloader struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
	metrics           *Metrics
	log               logr.Logger
}

// NewCertReloader loads the key pair once; failure is fatal to startup.
func NewCertReloader(certFile, keyFile string, m *Metrics, log logr.Logger) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile, metrics: m, log: log}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS key pair: %w", err)
	}
	r.cert.Store(&c)
	return r, nil
}

// GetCertificate is the tls.Config hook.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// Reload re-reads the key pair.
func (r *CertReloader) Reload() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if r.metrics != nil {
		r.metrics.certReload(err)
	}
	if err != nil {
		return fmt.Errorf("reloading TLS key pair: %w", err)
	}
	r.cert.Store(&c)
	return nil
}

// Watch reloads on changes until ctx ends. It watches the parent
// directories, not the files: Kubernetes updates Secret volumes by swapping
// a "..data" symlink, which never touches the files' own inodes.
func (r *CertReloader) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("creating file watcher: %w", err)
	}
	dirs := map[string]bool{filepath.Dir(r.certFile): true, filepath.Dir(r.keyFile): true}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			_ = w.Close()
			return fmt.Errorf("watching %s: %w", d, err)
		}
	}
	go func() {
		defer func() { _ = w.Close() }()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if r.relevant(ev.Name) {
					if timer == nil {
						timer = time.NewTimer(certReloadDebounce)
					} else {
						timer.Reset(certReloadDebounce)
					}
					fire = timer.C
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				r.log.Info("certificate watch error", "error", err.Error())
			case <-fire:
				fire = nil
				if err := r.Reload(); err != nil {
					r.log.Error(err, "certificate reload failed; keeping the previous certificate")
				} else {
					r.log.Info("certificate reloaded")
				}
			}
		}
	}()
	return nil
}

func (r *CertReloader) relevant(name string) bool {
	base := filepath.Base(name)
	return name == r.certFile || name == r.keyFile || strings.HasPrefix(base, "..") ||
		base == filepath.Base(r.certFile) || base == filepath.Base(r.keyFile)
}

// ClientAuthFor maps --mtls-mode to the tls.ClientAuthType.
func ClientAuthFor(mode string) (tls.ClientAuthType, error) {
	switch mode {
	case MTLSOff, "":
		return tls.NoClientCert, nil
	case MTLSOptional:
		return tls.VerifyClientCertIfGiven, nil
	case MTLSRequired:
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("invalid mTLS mode %q (want off, optional or required)", mode)
}

// LoadCAPool reads a PEM bundle of client CAs; an empty or unparseable file
// is an error (a silent empty pool would reject every client).
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("client CA file %s contains no PEM certificates", path)
	}
	return pool, nil
}

// NewTLSConfig builds the HTTPS listener's configuration.
func NewTLSConfig(r *CertReloader, mode, clientCAFile string) (*tls.Config, error) {
	if r == nil {
		return nil, errors.New("TLS needs a certificate reloader")
	}
	auth, err := ClientAuthFor(mode)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: r.GetCertificate,
		ClientAuth:     auth,
	}
	if auth != tls.NoClientCert {
		if clientCAFile == "" {
			return nil, errors.New("mTLS needs a client CA file")
		}
		if cfg.ClientCAs, err = LoadCAPool(clientCAFile); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

package router

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64 = 10

func newCA(t *testing.T, cn string) *testCA {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: k, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM cert and key for a leaf signed by the CA.
func (ca *testCA) issue(t *testing.T, cn string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial++
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{cn}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	for mode, want := range map[string]tls.ClientAuthType{
		"off": tls.NoClientCert, "optional": tls.VerifyClientCertIfGiven, "required": tls.RequireAndVerifyClientCert,
	} {
		if got, err := ClientAuthFor(mode); err != nil || got != want {
			t.Errorf("%s: %v %v", mode, got, err)
		}
	}
	if _, err := ClientAuthFor("maybe"); err == nil {
		t.Error("invalid mode accepted")
	}
	if _, err := NewTLSConfig(nil, "off", ""); err == nil {
		t.Error("nil reloader accepted")
	}
	dir := t.TempDir()
	if _, err := LoadCAPool(filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("missing CA file accepted")
	}
	writeFile(t, filepath.Join(dir, "empty.pem"), nil)
	if _, err := LoadCAPool(filepath.Join(dir, "empty.pem")); err == nil {
		t.Error("empty CA file accepted")
	}
	writeFile(t, filepath.Join(dir, "junk.pem"), []byte("not pem"))
	if _, err := LoadCAPool(filepath.Join(dir, "junk.pem")); err == nil {
		t.Error("non-PEM CA file accepted")
	}
}

func waitCertCN(t *testing.T, r *CertReloader, cn string) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for {
		c, _ := r.GetCertificate(nil)
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		if leaf.Subject.CommonName == cn {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("certificate never became %q (still %q)", cn, leaf.Subject.CommonName)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCertHotReload(t *testing.T) {
	ca := newCA(t, "ca")
	m := NewMetrics(BuildInfo{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Run("file rewrite", func(t *testing.T) {
		dir := t.TempDir()
		c1, k1 := ca.issue(t, "one", false)
		writeFile(t, filepath.Join(dir, "tls.crt"), c1)
		writeFile(t, filepath.Join(dir, "tls.key"), k1)
		r, err := NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), m, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Watch(ctx); err != nil {
			t.Fatal(err)
		}
		c2, k2 := ca.issue(t, "two", false)
		writeFile(t, filepath.Join(dir, "tls.key"), k2)
		writeFile(t, filepath.Join(dir, "tls.crt"), c2)
		waitCertCN(t, r, "two")
		// A broken rewrite keeps the previous certificate.
		writeFile(t, filepath.Join(dir, "tls.crt"), []byte("garbage"))
		if err := r.Reload(); err == nil {
			t.Fatal("garbage accepted")
		}
		waitCertCN(t, r, "two")
		if counterValue(m.certReloads.WithLabelValues("failure")) < 1 || counterValue(m.certReloads.WithLabelValues("success")) < 1 {
			t.Fatal("reload metrics")
		}
	})
	t.Run("AtomicWriter ..data swap", func(t *testing.T) {
		dir := t.TempDir()
		mk := func(name, cn string) {
			d := filepath.Join(dir, name)
			_ = os.Mkdir(d, 0o700)
			c, k := ca.issue(t, cn, false)
			writeFile(t, filepath.Join(d, "tls.crt"), c)
			writeFile(t, filepath.Join(d, "tls.key"), k)
		}
		mk("..2026_a", "first")
		if err := os.Symlink("..2026_a", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"tls.crt", "tls.key"} {
			if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		r, err := NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), m, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Watch(ctx); err != nil {
			t.Fatal(err)
		}
		mk("..2026_b", "second")
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink("..2026_b", tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		waitCertCN(t, r, "second")
	})
}

func TestHTTPSListenerAndMTLS(t *testing.T) {
	ca := newCA(t, "ca")
	rogueCA := newCA(t, "rogue")
	dir := t.TempDir()
	sc, sk := ca.issue(t, "router", false)
	writeFile(t, filepath.Join(dir, "tls.crt"), sc)
	writeFile(t, filepath.Join(dir, "tls.key"), sk)
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.pem)
	cc, ck := ca.issue(t, "client", true)
	goodClient, _ := tls.X509KeyPair(cc, ck)
	rc, rk := rogueCA.issue(t, "rogue-client", true)
	rogueClient, _ := tls.X509KeyPair(rc, rk)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	start := func(t *testing.T, mode string) string {
		t.Helper()
		m := NewMetrics(BuildInfo{})
		r, err := NewCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), m, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := NewTLSConfig(r, mode, filepath.Join(dir, "ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		s := NewServer(ServerOptions{HTTPSAddr: "127.0.0.1:0", TLSConfig: cfg, ShutdownTimeout: time.Second,
			Proxy: http.NotFoundHandler(), Metrics: m, Log: logr.Discard()})
		if err := s.Bind(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = s.Serve(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		return "https://" + s.Addr(ListenerHTTPS).String() + "/healthz"
	}
	get := func(url string, cert *tls.Certificate) (int, error) {
		tc := &tls.Config{RootCAs: roots}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	t.Run("off", func(t *testing.T) {
		u := start(t, MTLSOff)
		if code, err := get(u, nil); err != nil || code != 200 {
			t.Fatalf("%d %v", code, err)
		}
	})
	t.Run("optional", func(t *testing.T) {
		u := start(t, MTLSOptional)
		if code, err := get(u, nil); err != nil || code != 200 {
			t.Fatalf("no cert: %d %v", code, err)
		}
		if code, err := get(u, &goodClient); err != nil || code != 200 {
			t.Fatalf("valid cert: %d %v", code, err)
		}
	})
	t.Run("required", func(t *testing.T) {
		u := start(t, MTLSRequired)
		if _, err := get(u, nil); err == nil {
			t.Fatal("no client cert accepted")
		}
		if _, err := get(u, &rogueClient); err == nil {
			t.Fatal("rogue client cert accepted")
		}
		if code, err := get(u, &goodClient); err != nil || code != 200 {
			t.Fatalf("trusted cert: %d %v", code, err)
		}
	})
}

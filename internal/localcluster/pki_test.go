package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func testConfig(t *testing.T) Config {
	t.Helper()
	cfg := DefaultConfig()
	dir := t.TempDir()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.RunDir = filepath.Join(dir, "run")
	cfg.CacheDir = filepath.Join(dir, "cache")
	return cfg
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: not PEM", path)
	}
	crt, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return crt
}

func TestEnsurePKI(t *testing.T) {
	cfg := testConfig(t)
	if err := cfg.ensurePKI(); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(cfg.pkiDir(), "ca.crt")))

	api := readCert(t, filepath.Join(cfg.pkiDir(), "apiserver.crt"))
	for _, host := range []string{"kubernetes.default.svc", cfg.NodeIP.String(), "10.213.64.1", "127.0.0.1"} {
		if _, err := api.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("apiserver certificate does not verify for %s: %v", host, err)
		}
	}
	kubelet := readCert(t, filepath.Join(cfg.pkiDir(), "kubelet.crt"))
	if kubelet.Subject.CommonName != "system:node:agent-sandbox" || kubelet.Subject.Organization[0] != "system:nodes" {
		t.Errorf("kubelet client subject = %v", kubelet.Subject)
	}
	if _, err := kubelet.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client certificate: %v", err)
	}

	kc, err := clientcmd.LoadFromFile(cfg.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if got := kc.Clusters["agent-sandbox"].Server; got != "https://10.213.0.1:6443" {
		t.Errorf("admin kubeconfig server = %s", got)
	}

	// A second run must keep every file: unchanged files mean no restarts.
	st1, _ := os.Stat(filepath.Join(cfg.pkiDir(), "apiserver.crt"))
	time.Sleep(10 * time.Millisecond)
	if err := cfg.ensurePKI(); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(filepath.Join(cfg.pkiDir(), "apiserver.crt"))
	if !st1.ModTime().Equal(st2.ModTime()) {
		t.Error("second ensurePKI rewrote apiserver.crt")
	}

	// A changed node name reissues the certificates that name it.
	cfg.NodeName = "other"
	if err := cfg.ensurePKI(); err != nil {
		t.Fatal(err)
	}
	if got := readCert(t, filepath.Join(cfg.pkiDir(), "kubelet-serving.crt")).Subject.CommonName; got != "other" {
		t.Errorf("kubelet serving CN after rename = %s", got)
	}
}

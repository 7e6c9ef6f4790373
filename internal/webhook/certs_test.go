package webhook

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestResolveCertFilesCombinedPEM(t *testing.T) {
	dir := t.TempDir()
	ca, err := newCA(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := newServing(ca, DNSNames("svc", "ns", ""), time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CombinedCertName), append(append([]byte{}, kp.certPEM...), kp.keyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	certName, keyName := ResolveCertFiles(dir, DefaultCertName, DefaultKeyName)
	if certName != CombinedCertName || keyName != CombinedCertName {
		t.Fatalf("resolved %s/%s, want cert.pem for both", certName, keyName)
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, certName), filepath.Join(dir, keyName)); err != nil {
		t.Fatalf("combined cert.pem does not load: %v", err)
	}
	// Explicit names are never second-guessed.
	if c, k := ResolveCertFiles(dir, "my.crt", "my.key"); c != "my.crt" || k != "my.key" {
		t.Fatalf("explicit names replaced: %s %s", c, k)
	}
	// Default files present: they win.
	if err := os.WriteFile(filepath.Join(dir, DefaultCertName), kp.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if c, _ := ResolveCertFiles(dir, DefaultCertName, DefaultKeyName); c != DefaultCertName {
		t.Fatalf("resolved %s with tls.crt present", c)
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Enable: true, Port: 9443, CertName: "a", KeyName: "b", ServiceName: "s", Namespace: "n"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.Port = 0 },
		func(o *Options) { o.CertName = "" },
		func(o *Options) { o.KeyName = "" },
		func(o *Options) { o.ServiceName = "" },
	} {
		o := ok
		bad(&o)
		if o.Validate() == nil {
			t.Fatalf("accepted %+v", o)
		}
	}
	if (Options{}).Validate() != nil {
		t.Fatal("disabled webhook options must not need values")
	}
}

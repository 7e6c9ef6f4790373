package latebind

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestKeyFileRoundTrip(t *testing.T) {
	s, err := GenerateSigner()
	if err != nil {
		t.Fatal(err)
	}
	pemKey, err := s.EncodePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := LoadSigner(path)
	if err != nil || back.PublicKey() != s.PublicKey() {
		t.Fatalf("LoadSigner = %v, %v", back, err)
	}
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSigner(path); err == nil {
		t.Fatal("garbage accepted as a key")
	}
}

func TestVerify(t *testing.T) {
	s, _ := GenerateSigner()
	pub, err := ParsePublicKey(s.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	p := Payload{SandboxUID: "sb", ClaimUID: "c", Target: "10.1.2.3", Env: []Var{{Name: "A", Value: "1"}}}
	env, _ := s.Sign(p)
	at := netip.MustParseAddr("10.1.2.3")
	got, err := Verify(pub, env, at, time.Now())
	if err != nil || got.Env[0].Value != "1" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	if _, err := Verify(pub, env, netip.MustParseAddr("10.1.2.4"), time.Now()); err == nil {
		t.Fatal("accepted on another address")
	}
	if _, err := Verify(pub, env, at, time.Now().Add(Validity+Skew+time.Second)); err == nil {
		t.Fatal("accepted a stale envelope")
	}
	bad := p
	bad.Env = []Var{{Name: "A=B", Value: "x"}}
	benv, _ := s.Sign(bad)
	if _, err := Verify(pub, benv, at, time.Now()); err == nil {
		t.Fatal("accepted an invalid variable name")
	}
	if _, err := ParsePublicKey("ed25519:AAAA"); err == nil {
		t.Fatal("short key accepted")
	}
}

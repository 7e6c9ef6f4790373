package localcluster

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The cluster's PKI: one CA signs every serving and client certificate, and a
// separate key signs service-account tokens. ECDSA P-256 keeps generation
// instant. Leaves are regenerated whenever they no longer match the config
// (names, addresses), are not signed by the current CA, or near expiry.

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	leafRenewal  = 30 * 24 * time.Hour
)

// certSpec describes one leaf certificate.
type certSpec struct {
	name   string // file stem under pki/
	cn     string
	orgs   []string
	dns    []string
	ips    []net.IP
	server bool // serverAuth, else clientAuth
}

func (c Config) leafSpecs() []certSpec {
	nodeIP := net.IP(c.NodeIP.AsSlice())
	loop := net.IPv4(127, 0, 0, 1)
	return []certSpec{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local", "localhost", c.NodeName},
			ips: []net.IP{loop, nodeIP, net.IP(c.serviceIP().AsSlice())}},
		{name: "kubelet-serving", cn: c.NodeName, server: true,
			dns: []string{c.NodeName, "localhost"}, ips: []net.IP{nodeIP, loop}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "admin", cn: "kubernetes-admin", orgs: []string{"system:masters"}},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kubelet", cn: "system:node:" + c.NodeName, orgs: []string{"system:nodes"}},
		// Add-ons. kube-proxy's user is bound to system:node-proxier by the
		// apiserver's bootstrap policy; the others get the ClusterRoles in
		// addonRBAC and nothing more.
		{name: "kube-proxy", cn: "system:kube-proxy"},
		{name: "coredns", cn: "system:agent-sandbox:coredns"},
		{name: "kube-router", cn: "system:agent-sandbox:kube-router"},
		{name: "local-path-provisioner", cn: "system:agent-sandbox:local-path-provisioner"},
		hibernateAgentCert(),
		cpuAgentCert(),
	}
}

// ensurePKI creates or refreshes the CA, the service-account key and every
// leaf, then writes the component kubeconfigs. Unchanged files are not
// rewritten, so a warm Up does not look like a configuration change.
func (c Config) ensurePKI() error {
	dir := c.pkiDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	ca, caKey, err := ensureCA(dir)
	if err != nil {
		return err
	}
	if err := ensureSAKey(dir); err != nil {
		return err
	}
	for _, s := range c.leafSpecs() {
		if err := ensureLeaf(dir, s, ca, caKey); err != nil {
			return fmt.Errorf("certificate %s: %w", s.name, err)
		}
	}
	return c.writeKubeconfigs()
}

func ensureCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if crt, key, err := loadPair(crtPath, keyPath); err == nil && time.Until(crt.NotAfter) > leafValidity {
		return crt, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "agent-sandbox-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	crt, _ := x509.ParseCertificate(der)
	if err := writePair(crtPath, keyPath, der, key); err != nil {
		return nil, nil, err
	}
	return crt, key, nil
}

func ensureSAKey(dir string) error {
	keyPath, pubPath := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if _, err := os.Stat(keyPath); err == nil {
		if _, err := os.Stat(pubPath); err == nil {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encode service-account public key: %w", err)
	}
	if err := writeFileIfChanged(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileIfChanged(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

func ensureLeaf(dir string, s certSpec, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	crtPath, keyPath := filepath.Join(dir, s.name+".crt"), filepath.Join(dir, s.name+".key")
	if crt, _, err := loadPair(crtPath, keyPath); err == nil && leafMatches(crt, s, ca) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	usage := x509.ExtKeyUsageClientAuth
	if s.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(leafValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
		DNSNames:              s.dns,
		IPAddresses:           s.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	return writePair(crtPath, keyPath, der, key)
}

// leafMatches reports whether an existing certificate can be kept.
func leafMatches(crt *x509.Certificate, s certSpec, ca *x509.Certificate) bool {
	if crt.CheckSignatureFrom(ca) != nil || time.Until(crt.NotAfter) < leafRenewal {
		return false
	}
	if crt.Subject.CommonName != s.cn || !slices.Equal(crt.Subject.Organization, s.orgs) ||
		!slices.Equal(crt.DNSNames, s.dns) || len(crt.IPAddresses) != len(s.ips) {
		return false
	}
	for i, ip := range s.ips {
		if !crt.IPAddresses[i].Equal(ip) {
			return false
		}
	}
	return true
}

func loadPair(crtPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPEM, err := os.ReadFile(crtPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	crt, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return crt, key, nil
}

func writePair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	if err := writeFileIfChanged(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFileIfChanged(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would still be valid.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// kubeconfigUsers maps kubeconfig file names to the client certificate they embed.
var kubeconfigUsers = map[string]string{
	"controller-manager.conf": "controller-manager",
	"scheduler.conf":          "scheduler",
	"kubelet.conf":            "kubelet",
	"kube-proxy.conf":         "kube-proxy",
	"coredns.conf":            "coredns",
	"kube-router.conf":        "kube-router",
	"local-path.conf":         "local-path-provisioner",
	hibernateAgentConf:        compHibernateAgent,
	cpuAgentConf:              compCPUAgent,
}

func (c Config) apiServerURL() string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(c.NodeIP.String(), fmt.Sprint(c.APIServerPort)))
}

// writeKubeconfigs writes the component kubeconfigs under pki/ and the admin
// kubeconfig at KubeconfigPath, all with embedded credentials.
func (c Config) writeKubeconfigs() error {
	files := map[string]string{c.KubeconfigPath(): "admin"}
	for f, u := range kubeconfigUsers {
		files[filepath.Join(c.pkiDir(), f)] = u
	}
	caPEM, err := os.ReadFile(filepath.Join(c.pkiDir(), "ca.crt"))
	if err != nil {
		return fmt.Errorf("read CA: %w", err)
	}
	for path, user := range files {
		crt, err := os.ReadFile(filepath.Join(c.pkiDir(), user+".crt"))
		if err != nil {
			return fmt.Errorf("read %s certificate: %w", user, err)
		}
		key, err := os.ReadFile(filepath.Join(c.pkiDir(), user+".key"))
		if err != nil {
			return fmt.Errorf("read %s key: %w", user, err)
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["agent-sandbox"] = &clientcmdapi.Cluster{Server: c.apiServerURL(), CertificateAuthorityData: caPEM}
		kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
		kc.Contexts["agent-sandbox"] = &clientcmdapi.Context{Cluster: "agent-sandbox", AuthInfo: user}
		kc.CurrentContext = "agent-sandbox"
		data, err := clientcmd.Write(*kc)
		if err != nil {
			return fmt.Errorf("encode kubeconfig %s: %w", path, err)
		}
		if err := writeFileIfChanged(path, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeFileIfChanged writes data atomically unless the file already holds it.
func writeFileIfChanged(path string, data []byte, perm os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

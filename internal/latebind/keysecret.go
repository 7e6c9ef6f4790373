package latebind

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultKeySecret is the Secret, in the controller's namespace, that holds
// the key of a controller managing its own (--manage-late-binding-key).
// RBAC grants get on this one name only.
const DefaultKeySecret = "agent-sandbox-late-binding-key"

// Keys of the key Secret. SecretPrivateKey is what LoadSigner reads;
// SecretPublicKey is informational (the KeyEnv value), never trusted on
// read: the public key is always derived from the private one.
const (
	SecretPrivateKey = "ed25519.pem"
	SecretPublicKey  = "public-key"
)

// maxKeyRaces bounds the create/get rounds of EnsureKeySecret (a Secret
// deleted between another replica's create and our get).
const maxKeyRaces = 5

// EnsureKeySecret returns the Signer of the key kept in Secret ns/name,
// creating the Secret with a fresh key if it does not exist. Replicas that
// start together agree on one key: whoever's create loses (AlreadyExists)
// reads the winner's. An existing Secret that does not hold a valid key is
// an error, never overwritten: members of the pool trust the key it held,
// and an operator must decide (delete it, or pass --late-binding-key-file).
//
// c should be a direct client (no cache): the controller never lists or
// watches Secrets, and RBAC grants get on this one name only.
func EnsureKeySecret(ctx context.Context, c client.Client, ns, name string) (*Signer, bool, error) {
	for range maxKeyRaces {
		var s corev1.Secret
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)
		if err == nil {
			signer, err := signerFromSecret(&s)
			return signer, false, err
		}
		if !apierrors.IsNotFound(err) {
			return nil, false, fmt.Errorf("reading late-binding key secret %s/%s: %w", ns, name, err)
		}
		signer, err := GenerateSigner()
		if err != nil {
			return nil, false, err
		}
		pemKey, err := signer.EncodePrivateKey()
		if err != nil {
			return nil, false, err
		}
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
				"app.kubernetes.io/part-of": "agent-sandbox", "app.kubernetes.io/component": "extensions"}},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptrTrue(),
			Data:      map[string][]byte{SecretPrivateKey: pemKey, SecretPublicKey: []byte(signer.PublicKey())},
		}
		switch err := c.Create(ctx, &s); {
		case err == nil:
			return signer, true, nil
		case apierrors.IsAlreadyExists(err):
			continue // another replica won: read its key
		default:
			return nil, false, fmt.Errorf("creating late-binding key secret %s/%s: %w", ns, name, err)
		}
	}
	return nil, false, fmt.Errorf("late-binding key secret %s/%s: created and deleted concurrently %d times", ns, name, maxKeyRaces)
}

func signerFromSecret(s *corev1.Secret) (*Signer, error) {
	signer, err := ParsePrivateKey(s.Data[SecretPrivateKey])
	if err != nil {
		return nil, fmt.Errorf("late-binding key secret %s/%s key %s: %w (delete the Secret to have a new key generated)", s.Namespace, s.Name, SecretPrivateKey, err)
	}
	return signer, nil
}

// ParsePrivateKey reads a PEM "PRIVATE KEY" block holding an Ed25519 key
// (PKCS #8, as EncodePrivateKey and `openssl genpkey -algorithm ed25519`
// write it).
func ParsePrivateKey(data []byte) (*Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("want a PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing PKCS #8 key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("want an Ed25519 key, got %T", k)
	}
	return NewSigner(priv)
}

func ptrTrue() *bool { b := true; return &b }

// Package latebind is the protocol by which the claim controller hands a
// claim's environment to the sandboxd of a warm Sandbox it just adopted
// ("late binding"): a signed, single-target, short-lived envelope.
//
// Trust model. The controller holds an Ed25519 private key; sandboxd is
// started with the matching public key (public material: it may sit in a
// template's env, where anyone with get on Pods can read it). sandboxd
// accepts an envelope only when
//
//   - its signature verifies under that key (so only the key holder, the
//     controller, can produce one: neither another tenant's pod that can
//     reach sandboxd over the network nor a client that can read
//     Sandboxes, Pods or pools learns anything that lets it sign);
//   - it names the address the request arrived on as its target (so an
//     envelope captured for one sandbox cannot be replayed into another:
//     live Pod IPs are unique);
//   - it is within its validity window (so an old capture goes stale);
//   - it is for the claim the daemon is already bound to, if any (the first
//     accepted envelope binds the daemon to that claim UID and Sandbox UID
//     for the rest of its life).
//
// The envelope carries the values in clear: confidentiality rests on the
// pod network, as for every other call into sandboxd.
package latebind

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
)

// KeyEnv is the environment variable that carries the controller's public
// key into sandboxd (see EncodePublicKey). A container whose env sets it to
// the controller's key is one the controller may deliver to: it runs a
// sandboxd that accepts late-bound env.
const KeyEnv = "AGENT_SANDBOX_DELIVERY_KEY"

// Path is the sandboxd REST endpoint of deliveries (POST an Envelope,
// GET the binding state).
const Path = "/v1/late-binding/env"

// DefaultPort is the sandboxd REST port deliveries go to.
const DefaultPort = 8080

// Version is the payload format.
const Version = 1

// Validity is how long a signed envelope is accepted; Skew tolerates clock
// differences between the controller and the node.
const (
	Validity = 2 * time.Minute
	Skew     = 30 * time.Second
)

// domain separates these signatures from any other use of the key.
const domain = "agent-sandbox/late-binding/v1\x00"

const keyPrefix = "ed25519:"

// Var is one environment variable.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Payload is what the controller signs.
type Payload struct {
	V          int    `json:"v"`
	Namespace  string `json:"namespace"`
	Sandbox    string `json:"sandbox"`
	SandboxUID string `json:"sandboxUID"`
	ClaimUID   string `json:"claimUID"`
	Container  string `json:"container"`
	// Target is the Pod IP the envelope is for.
	Target string `json:"target"`
	// IssuedAt and Expires are Unix nanoseconds.
	IssuedAt int64  `json:"issuedAt"`
	Expires  int64  `json:"expires"`
	Nonce    string `json:"nonce"`
	Env      []Var  `json:"env"`
}

// Digest identifies what a payload applies (claim, container and the
// variables in order), independent of when or by whom it was signed, so
// that a re-delivery of the same env is recognised as already applied.
// It is returned only to a sender that proved it holds the key or replayed
// a whole envelope (which carries the values anyway), never to a reader.
func (p *Payload) Digest() string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode([]any{p.ClaimUID, p.SandboxUID, p.Container, p.Env})
	return hex.EncodeToString(h.Sum(nil))
}

// Envelope is the wire form: the exact payload bytes and their signature.
type Envelope struct {
	Payload   []byte `json:"payload"`
	Signature []byte `json:"signature"`
}

// Ack is sandboxd's answer to an accepted envelope.
type Ack struct {
	ClaimUID string `json:"claimUID"`
	Digest   string `json:"digest"`
	// Applied is false when this exact env was already in force.
	Applied bool `json:"applied"`
}

// State is what GET Path reports: whether and to which claim the daemon is
// bound, how often env was applied, and which key it trusts (KeyID; ""
// when late binding is off). Never values or digests.
type State struct {
	Bound    bool   `json:"bound"`
	ClaimUID string `json:"claimUID,omitempty"`
	Applies  int    `json:"applies"`
	KeyID    string `json:"keyID,omitempty"`
}

// KeyID is a short fingerprint of a delivery public key: the first 16 hex
// digits of the SHA-256 of the key bytes. It is public (the key itself
// is), and lets the controller check, before it adopts a member for an
// env claim, that the member runs a sandboxd trusting its key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Signer signs payloads with the controller's key.
type Signer struct {
	priv ed25519.PrivateKey
	now  func() time.Time
}

// NewSigner returns a Signer for priv.
func NewSigner(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("late-binding key: want an Ed25519 private key of %d bytes, got %d", ed25519.PrivateKeySize, len(priv))
	}
	return &Signer{priv: priv, now: time.Now}, nil
}

// GenerateSigner returns a Signer with a fresh key.
func GenerateSigner() (*Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating late-binding key: %w", err)
	}
	return NewSigner(priv)
}

// PublicKey is the value of KeyEnv that trusts this signer.
func (s *Signer) PublicKey() string {
	return EncodePublicKey(s.priv.Public().(ed25519.PublicKey))
}

// KeyID is the fingerprint of this signer's public key (see KeyID).
func (s *Signer) KeyID() string { return KeyID(s.priv.Public().(ed25519.PublicKey)) }

// Sign fills in version, validity and nonce and returns the envelope.
func (s *Signer) Sign(p Payload) (*Envelope, error) {
	now := s.now()
	p.V = Version
	p.IssuedAt = now.UnixNano()
	p.Expires = now.Add(Validity).UnixNano()
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("late-binding nonce: %w", err)
	}
	p.Nonce = hex.EncodeToString(nonce[:])
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding late-binding payload: %w", err)
	}
	return &Envelope{Payload: data, Signature: ed25519.Sign(s.priv, signed(data))}, nil
}

func signed(data []byte) []byte { return append([]byte(domain), data...) }

// EncodePublicKey renders pub as a KeyEnv value.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return keyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// ParsePublicKey reads a KeyEnv value.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, keyPrefix)
	if !ok {
		return nil, fmt.Errorf("late-binding public key must start with %q", keyPrefix)
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("late-binding public key: %w", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("late-binding public key: want %d bytes, got %d", ed25519.PublicKeySize, len(b))
	}
	return ed25519.PublicKey(b), nil
}

// Refusal reasons of Verify; sandboxd reports them as 403.
var (
	ErrSignature = errors.New("signature does not verify under the delivery key")
	ErrTarget    = errors.New("envelope is for another address")
	ErrExpired   = errors.New("envelope is outside its validity window")
	ErrMalformed = errors.New("malformed envelope")
)

// Verify checks env against pub for a request that arrived on local at
// now, and returns the payload. The signature is checked before the
// payload is even parsed.
func Verify(pub ed25519.PublicKey, env *Envelope, local netip.Addr, now time.Time) (*Payload, error) {
	if env == nil || len(env.Payload) == 0 || len(env.Signature) != ed25519.SignatureSize {
		return nil, ErrMalformed
	}
	if !ed25519.Verify(pub, signed(env.Payload), env.Signature) {
		return nil, ErrSignature
	}
	var p Payload
	dec := json.NewDecoder(bytes.NewReader(env.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if p.V != Version || p.ClaimUID == "" || p.SandboxUID == "" {
		return nil, fmt.Errorf("%w: version %d, claim %q, sandbox %q", ErrMalformed, p.V, p.ClaimUID, p.SandboxUID)
	}
	target, err := netip.ParseAddr(p.Target)
	if err != nil || !local.IsValid() || target.Unmap() != local.Unmap() {
		return nil, fmt.Errorf("%w: for %q, received on %s", ErrTarget, p.Target, local)
	}
	issued, expires := time.Unix(0, p.IssuedAt), time.Unix(0, p.Expires)
	if now.Before(issued.Add(-Skew)) || now.After(expires.Add(Skew)) || expires.Sub(issued) > Validity {
		return nil, ErrExpired
	}
	for _, v := range p.Env {
		if v.Name == "" || strings.ContainsAny(v.Name, "=\x00") || strings.ContainsRune(v.Value, 0) {
			return nil, fmt.Errorf("%w: invalid variable %q", ErrMalformed, v.Name)
		}
	}
	return &p, nil
}

// LoadSigner reads the controller's key from path (see ParsePrivateKey).
// The file is meant to be a Secret volume only the controller's Pod mounts.
func LoadSigner(path string) (*Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading late-binding key: %w", err)
	}
	s, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("late-binding key %s: %w", path, err)
	}
	return s, nil
}

// EncodePrivateKey renders the signer's key as LoadSigner reads it.
func (s *Signer) EncodePrivateKey() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(s.priv)
	if err != nil {
		return nil, fmt.Errorf("encoding late-binding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Package lateenv is sandboxd's side of late binding (internal/latebind):
// it accepts the claim controller's signed env delivery and serves the
// environment every process sandboxd starts afterwards gets (legacy
// /execute, the /v1 process API, PTY sessions alike).
//
// The first accepted delivery binds the daemon to its claim and Sandbox
// UID; from then on only deliveries for that claim are accepted. The same
// env delivered twice is applied once; a newer delivery for the same claim
// (a re-signed one after the claim changed) replaces it, an older one is
// refused. State lives in memory: a restarted daemon starts unbound.
package lateenv

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// maxBody bounds an envelope (env of a claim is small; a Secret value can
// be up to 1 MiB, so leave room for a few).
const maxBody = 4 << 20

// Store holds the applied env. The zero value is not usable; use New.
type Store struct {
	key  ed25519.PublicKey // nil: late binding off
	base []string
	log  *slog.Logger
	now  func() time.Time

	mu       sync.RWMutex
	claimUID string
	sbUID    string
	digest   string
	issued   int64
	env      []string
	applies  int
}

// New returns a Store whose processes inherit base (usually os.Environ())
// plus what is delivered. key nil disables deliveries.
func New(key ed25519.PublicKey, base []string, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{key: key, base: base, log: log, now: time.Now}
}

// FromEnviron builds a Store from the daemon's environment: the key from
// latebind.KeyEnv (absent: late binding off, an invalid one is an error).
func FromEnviron(log *slog.Logger) (*Store, error) {
	var key ed25519.PublicKey
	if v, ok := os.LookupEnv(latebind.KeyEnv); ok && v != "" {
		k, err := latebind.ParsePublicKey(v)
		if err != nil {
			return nil, err
		}
		key = k
	}
	return New(key, os.Environ(), log), nil
}

// Environ is the environment of a process started now: the base with the
// delivered variables after it (exec keeps the last value of a name, so a
// delivered variable overrides a template one, as the Overrides policy the
// controller checked allows).
func (s *Store) Environ() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.base)+len(s.env))
	out = append(out, s.base...)
	return append(out, s.env...)
}

// State reports the binding (never values).
func (s *Store) State() latebind.State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := latebind.State{Bound: s.claimUID != "", ClaimUID: s.claimUID, Applies: s.applies}
	if s.key != nil {
		// Public: the controller checks it before adopting this sandbox
		// for an env claim.
		st.KeyID = latebind.KeyID(s.key)
	}
	return st
}

// Errors of Apply beyond latebind.Verify's.
var (
	ErrDisabled   = errors.New("late binding is not configured in this sandbox")
	ErrOtherClaim = errors.New("sandbox is bound to another claim")
	ErrSuperseded = errors.New("a newer delivery is already applied")
)

// Apply verifies env as received on local and applies it.
func (s *Store) Apply(env *latebind.Envelope, local netip.Addr) (*latebind.Ack, error) {
	if s.key == nil {
		return nil, ErrDisabled
	}
	p, err := latebind.Verify(s.key, env, local, s.now())
	if err != nil {
		return nil, err
	}
	digest := p.Digest()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimUID != "" && (s.claimUID != p.ClaimUID || s.sbUID != p.SandboxUID) {
		return nil, ErrOtherClaim
	}
	ack := &latebind.Ack{ClaimUID: p.ClaimUID, Digest: digest}
	switch {
	case s.digest == digest:
		return ack, nil // already in force: idempotent
	case s.claimUID != "" && p.IssuedAt <= s.issued:
		return nil, ErrSuperseded
	}
	vars := make([]string, 0, len(p.Env))
	for _, v := range p.Env {
		vars = append(vars, v.Name+"="+v.Value)
	}
	s.claimUID, s.sbUID, s.digest, s.issued, s.env = p.ClaimUID, p.SandboxUID, digest, p.IssuedAt, vars
	s.applies++
	ack.Applied = true
	s.log.Info("late-bound env applied", "claim_uid", p.ClaimUID, "sandbox", p.Namespace+"/"+p.Sandbox, "container", p.Container, "vars", len(vars))
	return ack, nil
}

// Handler serves latebind.Path: POST an envelope, GET the State.
func (s *Store) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.State())
		case http.MethodPost:
			s.post(w, r)
		default:
			w.Header().Set("Allow", "GET, POST")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
		}
	})
}

func (s *Store) post(w http.ResponseWriter, r *http.Request) {
	var env latebind.Envelope
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(data) > maxBody || json.Unmarshal(data, &env) != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "malformed envelope"})
		return
	}
	ack, err := s.Apply(&env, localAddr(r))
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, ack)
	case errors.Is(err, ErrDisabled):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case errors.Is(err, ErrOtherClaim), errors.Is(err, ErrSuperseded):
		s.log.Warn("late-bound env refused", "remote", r.RemoteAddr, "err", err.Error())
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	default:
		s.log.Warn("late-bound env refused", "remote", r.RemoteAddr, "err", err.Error())
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
	}
}

// localAddr is the address the request arrived on.
func localAddr(r *http.Request) netip.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

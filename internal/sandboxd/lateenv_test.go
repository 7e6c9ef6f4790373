package sandboxd

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	processv1 "sigs.k8s.io/agent-sandbox/api/proto/process/v1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/sandboxd/lateenv"
)

func lateDaemon(t *testing.T, s *latebind.Signer) *daemon {
	t.Helper()
	pub, err := latebind.ParsePublicKey(s.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	cfg := validConfig(filepath.Join(t.TempDir(), "workspace"))
	cfg.LateEnv = lateenv.New(pub, append(os.Environ(), "TEMPLATE_VAR=from-template"), nil)
	return start(t, cfg)
}

func post(t *testing.T, url string, env *latebind.Envelope) (int, string) {
	t.Helper()
	b, _ := json.Marshal(env)
	r, err := http.Post(url+latebind.Path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(body)
}

func payload(claimUID string) latebind.Payload {
	return latebind.Payload{Namespace: "ns", Sandbox: "pool-abc", SandboxUID: "sb-uid", ClaimUID: claimUID, Container: "runtime",
		Target: "127.0.0.1", Env: []latebind.Var{{Name: "API_KEY", Value: "s3cret"}, {Name: "TEMPLATE_VAR", Value: "from-claim"}}}
}

// A delivered env reaches every kind of process started afterwards: the
// legacy /execute, the process API's Execute and a PTY session; a
// delivered name overrides the template's.
func TestLateEnvAppliesToEveryProcessKind(t *testing.T) {
	s, _ := latebind.GenerateSigner()
	d := lateDaemon(t, s)
	code, body := call(t, "POST", d.legacy+"/execute", strings.NewReader(`{"command":"printenv API_KEY"}`))
	if code != 200 || !strings.Contains(body, `"exit_code":1`) {
		t.Fatalf("before delivery: %d %s", code, body)
	}
	env, err := s.Sign(payload("claim-a"))
	if err != nil {
		t.Fatal(err)
	}
	code, body = post(t, d.rest, env)
	if code != 200 || !strings.Contains(body, `"applied":true`) {
		t.Fatalf("delivery = %d %s", code, body)
	}
	code, body = call(t, "POST", d.legacy+"/execute", strings.NewReader(`{"command":"sh -c 'echo $API_KEY $TEMPLATE_VAR'"}`))
	if code != 200 || !strings.Contains(body, `"stdout":"s3cret from-claim\n"`) {
		t.Fatalf("legacy execute = %d %s", code, body)
	}
	res, err := d.client.Execute(t.Context(), &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"printenv", "API_KEY"}}})
	if err != nil || string(res.GetStdout()) != "s3cret\n" {
		t.Fatalf("Execute = %v %v", res, err)
	}
	st, err := d.client.Start(t.Context(), &processv1.StartRequest{
		Config: &processv1.ProcessConfig{Command: []string{"sh", "-c", "echo pty:$API_KEY"}},
		Pty:    &processv1.PTY{Cols: 80, Rows: 24},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for !strings.Contains(out.String(), "pty:s3cret") {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("PTY output %q: %v", out.String(), err)
		}
		out.Write(ev.GetStdout())
	}
	// The same env again (a controller retry, re-signed): applied once.
	env2, _ := s.Sign(payload("claim-a"))
	code, body = post(t, d.rest, env2)
	if code != 200 || !strings.Contains(body, `"applied":false`) {
		t.Fatalf("re-delivery = %d %s", code, body)
	}
	if got := d.d.LateEnv().State(); got.Applies != 1 || got.ClaimUID != "claim-a" {
		t.Fatalf("state = %+v", got)
	}
	// The state endpoint reports the binding, never values.
	code, body = call(t, "GET", d.rest+latebind.Path, nil)
	if code != 200 || strings.Contains(body, "s3cret") || !strings.Contains(body, `"claimUID":"claim-a"`) {
		t.Fatalf("state = %d %s", code, body)
	}
}

// The attacks: an unsigned or foreign-signed envelope, one signed for
// another address, one for another claim once bound, a stale one, and a
// tampered payload. All refused, and nothing is applied.
func TestLateEnvRefusesForgedAndReplayedDeliveries(t *testing.T) {
	s, _ := latebind.GenerateSigner()
	d := lateDaemon(t, s)
	mallory, _ := latebind.GenerateSigner()

	forged, _ := mallory.Sign(payload("claim-a"))
	if code, body := post(t, d.rest, forged); code != 403 {
		t.Fatalf("foreign key: %d %s", code, body)
	}
	if code, body := post(t, d.rest, &latebind.Envelope{Payload: []byte(`{"v":1}`)}); code != 403 {
		t.Fatalf("unsigned: %d %s", code, body)
	}
	other := payload("claim-a")
	other.Target = "10.0.0.7" // signed for another sandbox's pod
	elsewhere, _ := s.Sign(other)
	if code, body := post(t, d.rest, elsewhere); code != 403 || !strings.Contains(body, "another address") {
		t.Fatalf("replay from another sandbox: %d %s", code, body)
	}
	good, _ := s.Sign(payload("claim-a"))
	tampered := *good
	tampered.Payload = bytes.Replace(good.Payload, []byte("s3cret"), []byte("evil!!"), 1)
	if code, body := post(t, d.rest, &tampered); code != 403 {
		t.Fatalf("tampered: %d %s", code, body)
	}
	if st := d.d.LateEnv().State(); st.Bound || st.Applies != 0 {
		t.Fatalf("something was applied: %+v", st)
	}
	if code, body := post(t, d.rest, good); code != 200 {
		t.Fatalf("genuine: %d %s", code, body)
	}
	forB, _ := s.Sign(payload("claim-b"))
	if code, body := post(t, d.rest, forB); code != 409 {
		t.Fatalf("another claim's delivery: %d %s", code, body)
	}
	res, err := d.client.Execute(t.Context(), &processv1.ExecuteRequest{Config: &processv1.ProcessConfig{Command: []string{"printenv", "API_KEY"}}})
	if err != nil || string(res.GetStdout()) != "s3cret\n" {
		t.Fatalf("Execute = %v %v", res, err)
	}
}

func TestLateEnvExpiredEnvelope(t *testing.T) {
	s, _ := latebind.GenerateSigner()
	pub, _ := latebind.ParsePublicKey(s.PublicKey())
	env, _ := s.Sign(payload("claim-a"))
	later := time.Now().Add(latebind.Validity + latebind.Skew + time.Second)
	if _, err := latebind.Verify(pub, env, mustAddr("127.0.0.1"), later); err == nil {
		t.Fatal("a stale envelope verified")
	}
	if _, err := latebind.Verify(pub, env, mustAddr("127.0.0.1"), time.Now()); err != nil {
		t.Fatal(err)
	}
}

// Without a key no delivery is possible at all.
func TestLateEnvDisabledWithoutKey(t *testing.T) {
	d := start(t, validConfig(filepath.Join(t.TempDir(), "workspace")))
	s, _ := latebind.GenerateSigner()
	env, _ := s.Sign(payload("claim-a"))
	if code, body := post(t, d.rest, env); code != 404 {
		t.Fatalf("delivery without key: %d %s", code, body)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// BenchmarkLateEnvDelivery is the marginal cost late binding adds to a
// warm claim: sign a 5-variable envelope, POST it to a real sandboxd on
// loopback, verify and apply it (a fresh daemon binding each time would
// need a fresh daemon, so each iteration is a newer envelope for the same
// claim with different values: the same verify-and-apply path).
//
//	go test -run '^$' -bench BenchmarkLateEnvDelivery ./internal/sandboxd/
func BenchmarkLateEnvDelivery(b *testing.B) {
	s, _ := latebind.GenerateSigner()
	pub, _ := latebind.ParsePublicKey(s.PublicKey())
	cfg := validConfig(filepath.Join(b.TempDir(), "workspace"))
	cfg.LateEnv = lateenv.New(pub, os.Environ(), nil)
	d := start(b, cfg)
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	i := 0
	for b.Loop() {
		i++
		p := payload("claim-a")
		p.Env = []latebind.Var{{Name: "V1", Value: "a"}, {Name: "V2", Value: "b"}, {Name: "V3", Value: "c"}, {Name: "V4", Value: "d"}, {Name: "V5", Value: time.Now().String()}}
		env, err := s.Sign(p)
		if err != nil {
			b.Fatal(err)
		}
		ack, err := latebind.Deliver(b.Context(), hc, "127.0.0.1", mustPort(b, d.rest), env)
		if err != nil || !ack.Applied {
			b.Fatalf("delivery %d: %+v %v", i, ack, err)
		}
	}
}

func mustPort(b *testing.B, url string) int {
	b.Helper()
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	return int(ap.Port())
}

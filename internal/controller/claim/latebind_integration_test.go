package claim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest/harness"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// Ports of the sandboxd processes of these tests, away from the defaults
// other stacks on this machine use.
const (
	lbRESTPort   = 18480
	lbLegacyPort = 18488
	lbGRPCPort   = 18490
	lbPodUIDEnv  = "LATEBIND_TEST_POD_UID"
)

var (
	sandboxdOnce sync.Once
	sandboxdBin  string
	sandboxdErr  error
)

// sandboxd builds cmd/sandboxd once per test binary.
func sandboxd(t testing.TB) string {
	t.Helper()
	sandboxdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "latebind-sandboxd-*")
		if err != nil {
			sandboxdErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		sandboxdBin, sandboxdErr = testenv.RepoBinary(ctx, "", "AGENT_SANDBOX_SANDBOXD", "sandboxd", dir)
	})
	if sandboxdErr != nil {
		t.Fatalf("building sandboxd: %v", sandboxdErr)
	}
	return sandboxdBin
}

// lbWorld is a world whose sandbox Pods are real sandboxd processes (one
// loopback address each) and whose controller holds a delivery key.
type lbWorld struct {
	*world
	signer  *latebind.Signer
	kubelet *testenv.ProcessKubelet
	// fakes runs the pods whose first container is not sandboxd.
	fakes *fakeDaemons
}

func newLBWorld(t testing.TB, lb claim.LateBinding) *lbWorld {
	t.Helper()
	testenv.SkipShort(t) // under -short no apiserver runs
	bin := sandboxd(t)
	w := &world{t: t, c: env().Client, writes: &exttest.WriteCounter{}, gate: &exttest.ReadyGate{}}
	w.ns = exttest.Namespace(t, w.c, "latebind")
	ns := w.ns
	if lb.Signer == nil {
		var err error
		if lb.Signer, err = latebind.GenerateSigner(); err != nil {
			t.Fatal(err)
		}
	}
	fakes := newFakeDaemons(t, lb.Signer.KeyID())
	k, err := testenv.StartProcessKubelet(env().Config, &testenv.ProcessKubelet{
		Select: func(p *corev1.Pod) bool {
			_, ok := p.Labels[labels.SandboxNameHash]
			return ok && p.Namespace == ns
		},
		Command: func(pod *corev1.Pod, ip netip.Addr, dir string) *exec.Cmd {
			if cmd := fakes.command(pod, ip); cmd != nil {
				return cmd
			}
			ws := filepath.Join(dir, "workspace")
			cmd := exec.Command(bin, "--listen-host="+ip.String(),
				"--legacy-port="+strconv.Itoa(lbLegacyPort), "--rest-port="+strconv.Itoa(lbRESTPort), "--grpc-port="+strconv.Itoa(lbGRPCPort),
				"--root-dir="+ws, "--shutdown-timeout=2s", "--log-format=text")
			cmd.Dir = dir
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + ws, "SANDBOX_" + lbPodUIDEnv + "=" + string(pod.UID)}
			// What a container sees: the literal env of its spec.
			for _, e := range pod.Spec.Containers[0].Env {
				if e.ValueFrom == nil {
					cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
				}
			}
			if f, err := os.Create(filepath.Join(dir, "sandboxd.log")); err == nil {
				cmd.Stdout, cmd.Stderr = f, f
			}
			return cmd
		},
		Probe: func(ctx context.Context, pod *corev1.Pod, ip netip.Addr) bool {
			if fakeMode(pod) != "" {
				return true // Ready by its own (not sandboxd's) readiness
			}
			var md struct {
				Env map[string]string `json:"env"`
			}
			code, body := httpDo(ctx, "GET", "http://"+net.JoinHostPort(ip.String(), strconv.Itoa(lbRESTPort))+"/v1/metadata", "")
			return code == 200 && json.Unmarshal([]byte(body), &md) == nil && md.Env["SANDBOX_"+lbPodUIDEnv] == string(pod.UID)
		},
		Ports:   []int{lbRESTPort, lbLegacyPort, lbGRPCPort},
		FirstIP: netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), 1}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	lb.Port = lbRESTPort
	opts := defaults()
	opts.LateBinding = lb
	w.mgr = harness.StartManager(t, env(), harness.ManagerOptions{Extensions: opts, Writes: w.writes})
	return &lbWorld{world: w, signer: lb.Signer, kubelet: k, fakes: fakes}
}

// restart replaces the manager (fresh in-memory state, same key).
func (w *lbWorld) restart(lb claim.LateBinding) {
	w.mgr.Stop()
	lb.Signer, lb.Port = w.signer, lbRESTPort
	opts := defaults()
	opts.LateBinding = lb
	w.mgr = harness.StartManager(w.t, env(), harness.ManagerOptions{Extensions: opts, Writes: w.writes})
}

// lateTemplate makes the template's container trust the controller's key.
func (w *lbWorld) lateTemplate(policy extv1beta1.EnvVarsInjectionPolicy, extra ...corev1.EnvVar) func(*extv1beta1.SandboxTemplate) {
	return func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.EnvVarsInjectionPolicy = policy
		c := &tm.Spec.PodTemplate.Spec.Containers[0]
		c.Env = append(append(c.Env, corev1.EnvVar{Name: latebind.KeyEnv, Value: w.signer.PublicKey()}), extra...)
	}
}

func httpDo(ctx context.Context, method, url, body string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// run executes command in the sandbox's sandboxd (legacy /execute) and
// returns its stdout.
func (w *lbWorld) run(sb *sandboxv1beta1.Sandbox, command string) string {
	w.t.Helper()
	body, _ := json.Marshal(map[string]string{"command": command})
	code, out := httpDo(context.Background(), "POST", "http://"+net.JoinHostPort(sb.Status.PodIPs[0], strconv.Itoa(lbLegacyPort))+"/execute", string(body))
	if code != 200 {
		w.t.Fatalf("execute %q in %s: %d %s", command, sb.Name, code, out)
	}
	var res struct {
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		w.t.Fatal(err)
	}
	return res.Stdout
}

func (w *lbWorld) lateState(sb *sandboxv1beta1.Sandbox) latebind.State {
	w.t.Helper()
	code, out := httpDo(context.Background(), "GET", "http://"+net.JoinHostPort(sb.Status.PodIPs[0], strconv.Itoa(lbRESTPort))+latebind.Path, "")
	var st latebind.State
	if code != 200 || json.Unmarshal([]byte(out), &st) != nil {
		w.t.Fatalf("late-binding state of %s: %d %s", sb.Name, code, out)
	}
	return st
}

func envOf(vars ...string) []extv1beta1.EnvVar {
	var out []extv1beta1.EnvVar
	for i := 0; i+1 < len(vars); i += 2 {
		out = append(out, extv1beta1.EnvVar{Name: vars[i], Value: vars[i+1]})
	}
	return out
}

// An env claim adopts a warm member with the same two writes as a plain
// claim, turns Ready only with its env applied, and the first command sees
// the env; the Sandbox, the Pod spec and the claim status carry no value.
func TestLateBindingEnvClaimAdoptsWarm(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 2, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed))

	w.writes.Reset()
	w.claim("plain", "pool", nil)
	plain := w.waitReady("plain")
	plainWrites := claimPathWrites(w.writes.Writes(), plain.Name)

	w.writes.Reset()
	c := w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "k-123", "MODE", "fast") })
	sb := w.waitReady("c1")
	if sb.Name == "c1" || sb.Labels[labels.LaunchType] != labels.LaunchTypeWarm || sb.Labels[labels.ClaimUID] != string(c.UID) {
		t.Fatalf("env claim got %s (%v), want a warm pool sandbox", sb.Name, sb.Labels)
	}
	envWrites := claimPathWrites(w.writes.Writes(), sb.Name)
	if len(envWrites) != 2 || len(plainWrites) != 2 {
		t.Errorf("claim-path writes: env claim %s, plain claim %s; want 2 each", exttest.Summary(envWrites), exttest.Summary(plainWrites))
	}
	if got := w.run(sb, "sh -c 'echo $API_KEY/$MODE'"); got != "k-123/fast\n" {
		t.Fatalf("first command saw %q", got)
	}
	if got := w.run(plain, "printenv API_KEY"); got != "" {
		t.Fatalf("the plain claim's sandbox sees %q", got)
	}
	cl := w.getClaim("c1")
	if cond := findCond(cl, extv1beta1.ClaimConditionLateBinding); cond == nil || cond.Reason != extv1beta1.ClaimReasonEnvApplied {
		t.Errorf("LateBinding condition = %+v", cond)
	}
	for what, obj := range map[string]any{"sandbox": w.mustSandbox(sb.Name), "pod": w.pod(sb.Name), "claim status": cl.Status} {
		b, _ := json.Marshal(obj)
		if bytes.Contains(b, []byte("k-123")) {
			t.Errorf("the %s carries the env value", what)
		}
	}
}

func findCond(c *extv1beta1.SandboxClaim, typ string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// claimPathWrites are the claim controller's writes for one adoption: the
// Sandbox patch, claim writes and events.
func claimPathWrites(ws []exttest.Write, sandbox string) []exttest.Write {
	var out []exttest.Write
	for _, x := range ws {
		if (x.Resource == "sandboxes" && x.Name == sandbox && x.Verb == "patch") || strings.HasPrefix(x.Resource, "sandboxclaims") || x.Resource == "events" {
			out = append(out, x)
		}
	}
	return out
}

// Overrides replaces a template value; Disallowed refuses as on the cold
// path; Allowed refuses overriding a template variable.
func TestLateBindingPolicies(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("over", 1, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyOverrides, corev1.EnvVar{Name: "MODE", Value: "template"}))
	w.readyPool("allowed", 1, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed, corev1.EnvVar{Name: "MODE", Value: "template"}))
	w.readyPool("none", 1, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyDisallowed))

	w.claim("o", "over", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("MODE", "claim") })
	sb := w.waitReady("o")
	if sb.Name == "o" {
		t.Fatal("Overrides claim went cold")
	}
	if got := w.run(sb, "printenv MODE"); got != "claim\n" {
		t.Fatalf("MODE = %q, want the claim's value", got)
	}
	if spec := w.mustSandbox(sb.Name).Spec.PodTemplate.Spec.Containers[0].Env; spec[len(spec)-1].Value != "template" {
		t.Fatalf("the Sandbox spec was edited: %+v", spec)
	}

	w.claim("d", "none", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("LD_PRELOAD", "/tmp/evil.so") })
	w.waitReason("d", extv1beta1.ClaimReasonEnvVarsInjectionRejected,
		"environment variable injection rejected: environment variable injection is not allowed by the template policy")
	w.claim("a", "allowed", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("MODE", "claim") })
	w.waitReason("a", extv1beta1.ClaimReasonReconcilerError, "")
	for _, pool := range []string{"none", "allowed"} {
		if ms, _ := exttest.PoolMembers(w.c, w.ns, pool); len(ms) != 1 || ms[0].Labels[labels.ClaimUID] != "" {
			t.Errorf("pool %s lost its member to a refused claim", pool)
		}
	}
}

// A template whose container does not run sandboxd says so by setting
// the key variable empty (the pool then injects nothing): env claims fall
// back cold, with the reason as a condition and an event.
func TestLateBindingWithoutSandboxdFallsBackCold(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 1, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
		c := &tm.Spec.PodTemplate.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: latebind.KeyEnv, Value: ""})
	})
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "k") })
	sb := w.waitReady("c1")
	if sb.Name != "c1" || sb.Labels[labels.LaunchType] != labels.LaunchTypeCold {
		t.Fatalf("got %s (%s), want cold", sb.Name, sb.Labels[labels.LaunchType])
	}
	if got := w.run(sb, "printenv API_KEY"); got != "k\n" {
		t.Fatalf("cold sandbox env = %q", got)
	}
	cond := findCond(w.getClaim("c1"), extv1beta1.ClaimConditionLateBinding)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != extv1beta1.ClaimReasonLateBindingUnavailable ||
		!strings.Contains(cond.Message, latebind.KeyEnv) {
		t.Fatalf("LateBinding condition = %+v", cond)
	}
	exttest.Eventually(t, wait, func() error {
		return (eventsList{}).expect(w.world, "SandboxClaim", "c1", extv1beta1.ClaimReasonLateBindingUnavailable)
	})
}

// lostAnswers delivers but loses sandboxd's answer, as a controller that
// dies right after sending would.
type lostAnswers struct{ n int }

func (l *lostAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := (&http.Transport{Proxy: nil, DisableKeepAlives: true}).RoundTrip(r)
	if err == nil {
		_ = resp.Body.Close()
		l.n++
	}
	return nil, errors.New("answer lost")
}

// A controller restart between adoption and confirmed delivery: the claim
// stays not Ready, and the next controller ends with the env applied
// exactly once.
func TestLateBindingControllerRestartMidDelivery(t *testing.T) {
	lost := &lostAnswers{}
	w := newLBWorld(t, claim.LateBinding{Client: &http.Client{Transport: lost}})
	w.readyPool("pool", 1, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed))
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "once") })
	w.waitReason("c1", extv1beta1.ClaimReasonEnvDeliveryPending, "")
	name := w.getClaim("c1").Status.SandboxStatus.Name
	if name == "" || name == "c1" {
		t.Fatalf("status sandbox = %q, want the adopted warm member", name)
	}
	w.restart(claim.LateBinding{})
	sb := w.waitReady("c1")
	if sb.Name != name {
		t.Fatalf("claim moved from %s to %s", name, sb.Name)
	}
	if st := w.lateState(sb); st.Applies != 1 || st.ClaimUID != string(w.getClaim("c1").UID) {
		t.Fatalf("sandboxd state %+v (first controller sent %d), want one apply for the claim", st, lost.n)
	}
	if lost.n == 0 {
		t.Fatal("the first controller never reached sandboxd; the test proves nothing")
	}
	if got := w.run(sb, "printenv API_KEY"); got != "once\n" {
		t.Fatalf("API_KEY = %q", got)
	}
}

// Two env claims racing for a pool of two: each gets its own member and
// its own env, nothing of the other's.
func TestLateBindingRacingClaims(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 2, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed))
	var wg sync.WaitGroup
	for _, n := range []string{"a", "b"} {
		wg.Go(func() {
			exttest.Create(t, w.c, func() *extv1beta1.SandboxClaim {
				c := exttest.NewClaim(w.ns, n, "pool")
				c.Spec.Env = envOf("WHO", n, "ONLY_"+n, "1")
				return c
			}())
		})
	}
	wg.Wait()
	sa, sb := w.waitReady("a"), w.waitReady("b")
	if sa.Name == sb.Name || sa.Name == "a" || sb.Name == "b" {
		t.Fatalf("sandboxes %s and %s, want two distinct warm members", sa.Name, sb.Name)
	}
	for n, s := range map[string]*sandboxv1beta1.Sandbox{"a": sa, "b": sb} {
		if got := w.run(s, "sh -c 'echo $WHO $ONLY_a$ONLY_b'"); got != n+" 1\n" {
			t.Errorf("claim %s's sandbox sees %q", n, got)
		}
	}
}

// The attack test: a process in another tenant's sandbox, and a client
// with only get/list on Sandboxes, Pods and the pool objects, try to push
// env into a warm sandbox (a free member, and one already bound). They
// find only public material, and every push is refused.
func TestLateBindingAttackersCannotPushEnv(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 3, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed))
	w.claim("victim", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "victim") })
	w.claim("mallory", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "mallory") })
	victim, attacker := w.waitReady("victim"), w.waitReady("mallory")
	free, err := exttest.PoolMembers(w.c, w.ns, "pool")
	if err != nil || len(free) == 0 {
		t.Fatalf("no free member: %v", err)
	}
	exttest.Eventually(t, wait, func() error {
		if len(w.mustSandbox(free[0].Name).Status.PodIPs) == 0 {
			return errors.New("free member has no IP")
		}
		return nil
	})
	freeSb := w.mustSandbox(free[0].Name)

	// 1. The read-only client: everything it can read.
	reader := readOnlyClient(t, w.ns)
	var loot bytes.Buffer
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"},
		{Group: sandboxv1beta1.GroupVersion.Group, Version: "v1beta1", Resource: "sandboxes"},
		{Group: extv1beta1.GroupVersion.Group, Version: "v1beta1", Resource: "sandboxwarmpools"},
		{Group: extv1beta1.GroupVersion.Group, Version: "v1beta1", Resource: "sandboxtemplates"},
		{Group: extv1beta1.GroupVersion.Group, Version: "v1beta1", Resource: "sandboxclaims"},
	} {
		list, err := reader.Resource(gvr).Namespace(w.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("read-only list %s: %v", gvr.Resource, err)
		}
		b, _ := json.Marshal(list)
		loot.Write(b)
	}
	if _, err := reader.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(w.ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		t.Fatal("the read-only client can read Secrets; the test setup is wrong")
	}
	if !bytes.Contains(loot.Bytes(), []byte(w.signer.PublicKey())) {
		t.Fatal("the public key is not even visible; the loot check proves nothing")
	}
	// With what it found, the best it can do is sign with a key of its own
	// and present the controller's public key (it has nothing else).
	forger, _ := latebind.GenerateSigner()
	for _, target := range []*sandboxv1beta1.Sandbox{freeSb, victim} {
		env, _ := forger.Sign(latebind.Payload{Namespace: w.ns, Sandbox: target.Name, SandboxUID: string(target.UID),
			ClaimUID: string(w.getClaim("mallory").UID), Target: target.Status.PodIPs[0], Env: []latebind.Var{{Name: "API_KEY", Value: "pwned"}}})
		if code, body := pushFrom(t, w, nil, target, env); code != http.StatusForbidden {
			t.Errorf("read-only client's push into %s: %d %s", target.Name, code, body)
		}
	}

	// 2. A process in mallory's sandbox posts to the victim's sandboxd:
	// a forged envelope, and the genuine envelope of mallory's own claim
	// (replayed from its sandbox into the victim's, as if captured).
	own, _ := w.signer.Sign(latebind.Payload{Namespace: w.ns, Sandbox: attacker.Name, SandboxUID: string(attacker.UID),
		ClaimUID: string(w.getClaim("mallory").UID), Target: attacker.Status.PodIPs[0], Env: []latebind.Var{{Name: "API_KEY", Value: "pwned"}}})
	forged, _ := forger.Sign(latebind.Payload{Namespace: w.ns, Sandbox: victim.Name, SandboxUID: string(victim.UID),
		ClaimUID: string(w.getClaim("victim").UID), Target: victim.Status.PodIPs[0], Env: []latebind.Var{{Name: "API_KEY", Value: "pwned"}}})
	for _, target := range []*sandboxv1beta1.Sandbox{victim, freeSb} {
		for what, env := range map[string]*latebind.Envelope{"forged": forged, "replayed": own} {
			if code, body := pushFrom(t, w, attacker, target, env); code != http.StatusForbidden {
				t.Errorf("%s push from mallory's sandbox into %s: %d %s", what, target.Name, code, body)
			}
		}
	}
	// Claim A's genuine delivery replayed into claim B's sandbox at B's
	// address (re-signed for it would need the key): refused as bound.
	if got := w.run(victim, "printenv API_KEY"); got != "victim\n" {
		t.Fatalf("victim sees API_KEY=%q", got)
	}
	if st := w.lateState(freeSb); st.Bound {
		t.Fatalf("the free member got bound: %+v", st)
	}
	if st := w.lateState(victim); st.Applies != 1 {
		t.Fatalf("victim applies = %d", st.Applies)
	}
}

// pushFrom posts env to target's delivery endpoint: from the test process
// (from == nil) or from a process inside the sandbox from (curl-free: a
// python-less shell has no HTTP client, so the test runs the request with
// from's address as source, which is what a process there would use).
func pushFrom(t *testing.T, w *lbWorld, from, target *sandboxv1beta1.Sandbox, env *latebind.Envelope) (int, string) {
	t.Helper()
	body, _ := json.Marshal(env)
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	if from != nil {
		src := net.ParseIP(from.Status.PodIPs[0])
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}).DialContext
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	resp, err := hc.Post("http://"+net.JoinHostPort(target.Status.PodIPs[0], strconv.Itoa(lbRESTPort))+latebind.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readOnlyClient impersonates a user bound to get/list/watch on pods and
// the project's resources in ns, and nothing else.
func readOnlyClient(t *testing.T, ns string) dynamic.Interface {
	t.Helper()
	ctx := context.Background()
	user := "reader-" + ns
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{sandboxv1beta1.GroupVersion.Group, extv1beta1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, rb} {
		if err := env().Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env().Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC is enforced once the binding is in the authorizer's cache.
	exttest.Eventually(t, wait, func() error {
		_, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	return dc
}

var _ = fmt.Sprintf

// Env from a Secret: resolved by the controller at delivery, never in the
// Sandbox, the Pod or the claim status; a Secret that did not opt in is
// refused, and the warm member stays in the pool.
func TestLateBindingEnvFromSecret(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 2, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed))
	ctx := context.Background()
	for name, optIn := range map[string]bool{"shared": true, "private": false} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}, Data: map[string][]byte{"token": []byte("tok-" + name)}}
		if optIn {
			sec.Annotations = map[string]string{extv1beta1.ClaimEnvAllowedAnnotation: "true"}
		}
		if err := w.c.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	fromSecret := func(secret string) func(*extv1beta1.SandboxClaim) {
		return func(c *extv1beta1.SandboxClaim) {
			c.Spec.Env = []extv1beta1.EnvVar{{Name: "TOKEN", ValueFrom: &extv1beta1.EnvVarSource{
				SecretKeyRef: &extv1beta1.SecretKeySelector{Name: secret, Key: "token"}}}}
		}
	}
	w.claim("ok", "pool", fromSecret("shared"))
	sb := w.waitReady("ok")
	if sb.Name == "ok" {
		t.Fatal("secret env claim went cold")
	}
	if got := w.run(sb, "printenv TOKEN"); got != "tok-shared\n" {
		t.Fatalf("TOKEN = %q", got)
	}
	for what, obj := range map[string]any{"sandbox": w.mustSandbox(sb.Name), "pod": w.pod(sb.Name), "claim": w.getClaim("ok")} {
		b, _ := json.Marshal(obj)
		if bytes.Contains(b, []byte("tok-shared")) {
			t.Errorf("the %s carries the Secret's value", what)
		}
	}
	w.claim("no", "pool", fromSecret("private"))
	w.waitReason("no", extv1beta1.ClaimReasonEnvVarsInjectionRejected, "")
	if ms, _ := exttest.PoolMembers(w.c, w.ns, "pool"); len(ms) == 0 {
		t.Error("the refused claim took a member")
	}
	if _, err := w.sandbox("no"); err == nil {
		t.Error("the refused claim got a cold sandbox")
	}
}

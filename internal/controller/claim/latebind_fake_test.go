package claim_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// fakeEnv in a template's first container makes the test kubelet run
// something other than sandboxd for its pods:
//
//   - fakeNone: a process that listens on nothing (nginx, busybox: no
//     sandboxd at the REST port);
//   - fakeLiar: a listener that answers the probe exactly as a sandboxd
//     trusting the controller's key would, but takes no delivery.
const (
	fakeEnv  = "LATEBIND_TEST_FAKE"
	fakeNone = "none"
	fakeLiar = "liar"
)

func fakeMode(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == fakeEnv {
			return e.Value
		}
	}
	return ""
}

// withFake makes a template's pods run a fake (see fakeEnv).
func withFake(mode string, edit func(*extv1beta1.SandboxTemplate)) func(*extv1beta1.SandboxTemplate) {
	return func(tm *extv1beta1.SandboxTemplate) {
		if edit != nil {
			edit(tm)
		}
		c := &tm.Spec.PodTemplate.Spec.Containers[0]
		c.Env = append(c.Env, corev1.EnvVar{Name: fakeEnv, Value: mode})
	}
}

// fakeDaemons counts what reaches the liars, per pod IP.
type fakeDaemons struct {
	t     testing.TB
	keyID string

	mu    sync.Mutex
	gets  map[string]int
	posts map[string]int
}

func newFakeDaemons(t testing.TB, keyID string) *fakeDaemons {
	t.Helper()
	return &fakeDaemons{t: t, keyID: keyID, gets: map[string]int{}, posts: map[string]int{}}
}

// command returns the process of a fake pod (nil: run sandboxd).
func (f *fakeDaemons) command(pod *corev1.Pod, ip netip.Addr) *exec.Cmd {
	mode := fakeMode(pod)
	if mode == "" {
		return nil
	}
	if mode == fakeLiar {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(lbRESTPort)))
		if err != nil {
			// The kubelet retries on a fresh address.
			return exec.Command("false")
		}
		addr := ip.String()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			if r.Method == http.MethodGet {
				f.gets[addr]++
			} else {
				f.posts[addr]++
			}
			f.mu.Unlock()
			if r.Method != http.MethodGet || r.URL.Path != latebind.Path {
				http.Error(w, "not sandboxd", http.StatusInternalServerError)
				return
			}
			_ = json.NewEncoder(w).Encode(latebind.State{KeyID: f.keyID})
		})}
		go func() { _ = srv.Serve(ln) }()
		f.t.Cleanup(func() { _ = srv.Close() })
	}
	return exec.Command("sleep", "3600")
}

func (f *fakeDaemons) counts(ip string) (gets, posts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[ip], f.posts[ip]
}

package claim_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
)

// BenchmarkLateBindingTimeToFirstOutput measures claim created → first
// command output (printenv through the legacy /execute of the sandbox's
// real sandboxd) on the real apiserver, for a warm claim without env, a
// warm claim with 5 late-bound env vars, and today's cold start of a claim
// with env (a template without the delivery key). Each iteration starts
// from a full pool; refills and cleanup are outside the measurement.
//
//	go test -run '^$' -bench BenchmarkLateBinding -benchtime 20x ./internal/controller/claim/
func BenchmarkLateBindingTimeToFirstOutput(b *testing.B) {
	w := newLBWorld(b, claim.LateBinding{})
	w.readyPool("warm", 1, w.lateTemplate(extv1beta1.EnvVarsInjectionPolicyAllowed))
	w.readyPool("cold", 0, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	})
	five := envOf("V1", "a", "V2", "b", "V3", "c", "V4", "d", "V5", "e")
	for _, mode := range []struct {
		name, pool string
		env        []extv1beta1.EnvVar
		want       string
	}{
		{"warm-plain", "warm", nil, "\n"},
		{"warm-env5", "warm", five, "e\n"},
		{"cold-env5", "cold", five, "e\n"},
	} {
		b.Run(mode.name, func(b *testing.B) {
			var lat []time.Duration
			i := 0
			for b.Loop() {
				b.StopTimer()
				if mode.pool == "warm" {
					exttest.Eventually(b, wait, func() error { return exttest.PoolReady(w.c, w.ns, "warm", 1) })
				}
				name := fmt.Sprintf("%s-%d", mode.name, i)
				i++
				c := exttest.NewClaim(w.ns, name, mode.pool)
				c.Spec.Env = mode.env
				b.StartTimer()
				start := time.Now()
				if err := w.c.Create(context.Background(), c); err != nil {
					b.Fatal(err)
				}
				sb := pollReady(b, w, name)
				if got := w.run(sb, "sh -c 'echo $V5'"); got != mode.want {
					b.Fatalf("%s: first output %q, want %q", mode.name, got, mode.want)
				}
				lat = append(lat, time.Since(start))
				b.StopTimer()
				cleanup(b, w, c, sb)
				b.StartTimer()
			}
			slices.Sort(lat)
			b.ReportMetric(float64(pct(lat, 50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(pct(lat, 99).Microseconds())/1000, "p99-ms")
		})
	}
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, (len(sorted)*p+99)/100-1)]
}

// pollReady waits for the claim to be Ready, polling every millisecond so
// the wait adds at most that much.
func pollReady(b *testing.B, w *lbWorld, name string) *sandboxv1beta1.Sandbox {
	b.Helper()
	deadline := time.Now().Add(wait)
	for {
		if exttest.ClaimReady(w.c, w.ns, name) == nil {
			var cl extv1beta1.SandboxClaim
			if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, &cl); err != nil {
				b.Fatal(err)
			}
			sb, err := w.sandbox(cl.Status.SandboxStatus.Name)
			if err == nil && len(sb.Status.PodIPs) > 0 {
				return sb
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("claim %s not Ready", name)
		}
		time.Sleep(time.Millisecond)
	}
}

// cleanup deletes the claim, its Sandbox and Pod (envtest runs no garbage
// collector), so sandboxd processes do not pile up.
func cleanup(b *testing.B, w *lbWorld, c *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) {
	b.Helper()
	ctx := context.Background()
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	for _, o := range []client.Object{c, sb, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sb.Namespace, Name: sb.Name}}} {
		if err := client.IgnoreNotFound(w.c.Delete(ctx, o, bg)); err != nil {
			b.Fatal(err)
		}
	}
}

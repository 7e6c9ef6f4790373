package bench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/bench"
	"sigs.k8s.io/agent-sandbox/internal/cli"
	"sigs.k8s.io/agent-sandbox/internal/devstack"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestRunAgainstIntegrationStack runs the harness against the integration
// stack: a real kube-apiserver, the controllers, the router and real
// sandboxd processes standing in for pods. It checks what the harness
// reports, not how fast the stack is.
func TestRunAgainstIntegrationStack(t *testing.T) {
	testenv.SkipShortNeeds(t, "the devstack (apiserver, controller, router, sandboxd)")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{WarmPoolReplicas: 2})
	if err != nil {
		t.Fatalf("starting the integration stack: %v", err)
	}
	defer func() { _ = st.Stop() }()

	t.Run("warm burst with time to interactive", func(t *testing.T) {
		res, err := bench.Run(ctx, bench.Config{
			RestConfig: st.Env.Config, Namespace: st.Namespace, WarmPool: st.WarmPool,
			Scenario: bench.Burst, Count: 10, PoolSize: 10, Timeout: 2 * time.Minute,
			Interact: cli.InteractThroughRouter(st.RouterURL),
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Claims != 10 || res.Ready != 10 || res.Errors != 0 {
			t.Fatalf("claims %d ready %d errors %d: %+v", res.Claims, res.Ready, res.Errors, firstErr(res))
		}
		if res.Warm != 10 || res.ColdLaunches != 0 {
			t.Errorf("a pre-warmed pool of 10 must serve 10 claims warm: warm %d cold %d", res.Warm, res.ColdLaunches)
		}
		// Connected is the SDK scenario's; the raw claims here have none.
		for _, m := range []string{bench.Created, bench.Bound, bench.Ready, bench.RuntimeAnswering, bench.FirstOutput} {
			if s := res.Milestones[m]; s.Count != 10 || s.P50 <= 0 || s.P50 > s.P99 || s.P99 > s.Max {
				t.Errorf("milestone %s summary %+v", m, s)
			}
		}
		if res.Writes == nil || res.ClientWrites < 1 || res.ClaimPathWrites <= 0 || res.RefillWrites <= 0 {
			t.Errorf("write accounting: client %.2f claim %.2f refill %.2f (%v)", res.ClientWrites, res.ClaimPathWrites, res.RefillWrites, res.Writes)
		}
		if c := res.Calibration; c == nil || c.Writes != 20 || c.WriteP50 <= 0 || c.WriteP50 > c.WriteP90 {
			t.Errorf("calibration %+v (error %q)", c, res.CalibrationError)
		}
		// The apiserver's own times of the claim path: every claim's create,
		// adoption patch and status write was served in the window.
		for _, k := range []string{"POST sandboxclaims", "PATCH sandboxes", "PATCH sandboxclaims/status", "etcd create sandboxclaims", "etcd update sandboxclaims"} {
			if st := res.ServerTimes[k]; st.Count < 10 || st.Mean <= 0 || st.Mean > time.Minute {
				t.Errorf("server time %s = %+v (all %v, error %q)", k, st, res.ServerTimes, res.ServerTimesError)
			}
		}
		if st := res.ServerTimes["POST sandboxclaims"]; st.Count != 10 {
			t.Errorf("server time counted %v claim creates, want the run's 10", st.Count)
		}
		// The calibration's ConfigMap is the harness's own: it must not outlive the run.
		var cms corev1.ConfigMapList
		if err := st.Client.List(ctx, &cms, client.InNamespace(st.Namespace)); err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "bench-calibration-") {
				t.Errorf("calibration ConfigMap %s left behind", cm.Name)
			}
		}
		var table bytes.Buffer
		if err := bench.WriteTable(&table, res); err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", table.String())
	})

	t.Run("time to interactive through the Go SDK", func(t *testing.T) {
		res, err := bench.RunSDK(ctx, bench.SDKConfig{
			RestConfig: st.Env.Config, Namespace: st.Namespace, WarmPool: st.WarmPool,
			Count: 4, PoolSize: 2, Pace: true, Timeout: 2 * time.Minute,
			Options: sandbox.Options{APIURL: st.RouterURL},
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Scenario != bench.SDK || res.Claims != 4 || res.Ready != 4 || res.Errors != 0 || res.Warm != 4 {
			t.Fatalf("claims %d ready %d errors %d warm %d: %s", res.Claims, res.Ready, res.Errors, res.Warm, firstErr(res))
		}
		for _, m := range []string{bench.Created, bench.Bound, bench.Ready, bench.Connected, bench.FirstOutput} {
			if s := res.Milestones[m]; s.Count != 4 || s.P50 <= 0 {
				t.Errorf("milestone %s summary %+v", m, s)
			}
		}
		if s := res.Steps["connected→first_output"]; s.Count != 4 {
			t.Errorf("steps %v", res.Steps)
		}
		var table bytes.Buffer
		if err := bench.WriteTable(&table, res); err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", table.String())
	})

	t.Run("cold", func(t *testing.T) {
		res, err := bench.Run(ctx, bench.Config{
			RestConfig: st.Env.Config, Namespace: st.Namespace, WarmPool: st.WarmPool,
			Scenario: bench.Cold, Count: 3, Timeout: 2 * time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ready != 3 || res.ColdLaunches != 3 || res.Warm != 0 {
			t.Errorf("an empty pool must serve 3 cold claims: ready %d cold %d warm %d", res.Ready, res.ColdLaunches, res.Warm)
		}
	})
}

func firstErr(r *bench.Result) string {
	for _, t := range r.Traces {
		if t.Err != "" {
			return t.Err
		}
	}
	return ""
}

package rollout

import (
	"context"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/devstack"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func TestPoolSizeFollowsLittlesLaw(t *testing.T) {
	for _, tc := range []struct {
		rate            float64
		episode, refill time.Duration
		headroom        float64
		want            int32
	}{
		{10, time.Second, 2 * time.Second, 1.5, 45}, // 10/s × 3 s × 1.5
		{0.1, time.Second, time.Second, 1.5, 1},     // never below 1
		{0, time.Second, time.Second, 1.5, 1},
		{4, 500 * time.Millisecond, 0, 0.5, 2}, // headroom < 1 counts as 1
	} {
		if got := PoolSize(tc.rate, tc.episode, tc.refill, tc.headroom); got != tc.want {
			t.Errorf("PoolSize(%v, %v, %v, %v) = %d, want %d", tc.rate, tc.episode, tc.refill, tc.headroom, got, tc.want)
		}
	}
}

func TestScriptedModelIsDeterministicAndScored(t *testing.T) {
	m := ScriptedModel{Accuracy: 0.5, Seed: 7}
	task := Tasks()[0]
	right, wrong := 0, 0
	for i := range 200 {
		code := m.Write(task, i)
		if code != m.Write(task, i) {
			t.Fatal("same episode, different code")
		}
		if code == task.solve() {
			right++
		} else {
			wrong++
		}
	}
	if right == 0 || wrong == 0 {
		t.Errorf("accuracy 0.5 gave %d right, %d wrong", right, wrong)
	}
	if Score(task, &sandbox.ExecutionResult{Stdout: task.Answer + "\n"}) != 1 ||
		Score(task, &sandbox.ExecutionResult{Stdout: "1\n"}) != 0 ||
		Score(task, &sandbox.ExecutionResult{ExitCode: 1}) != -1 || Score(task, nil) != -1 {
		t.Error("scores are not 1 / 0 / -1 for right / wrong / failed")
	}
}

// TestRolloutOnIntegrationStack runs a few episodes on the integration
// stack (real apiserver and controllers, real sandboxd processes, the
// router): each claims a fresh warm sandbox, runs the model's code there
// and is scored; afterwards no claim is left, and every reward is the one
// the model's code deserves.
func TestRolloutOnIntegrationStack(t *testing.T) {
	testenv.SkipShortNeeds(t, "the devstack (apiserver, controller, router, sandboxd)")
	ctx := context.Background()
	st, err := devstack.Start(ctx, devstack.Options{WarmPoolReplicas: 2, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Stop() })
	if err := SetPoolReplicas(ctx, st.Client, st.Namespace, st.WarmPool, PoolSize(2, time.Second, time.Second, 1.5)); err != nil {
		t.Fatal(err)
	}
	model := ScriptedModel{Accuracy: 0.6, Seed: 3}
	const episodes = 6
	res, err := Run(ctx, Config{
		Options:  sandbox.Options{Namespace: st.Namespace, RestConfig: st.Config, APIURL: st.RouterURL, Quiet: true},
		WarmPool: st.WarmPool, Episodes: episodes, Rate: 2, Concurrency: 3, Model: model,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	if res.Failed != 0 {
		for _, e := range res.Episodes {
			if e.Err != nil {
				t.Errorf("episode %d: %v", e.N, e.Err)
			}
		}
	}
	tasks := Tasks()
	for _, e := range res.Episodes {
		task := tasks[e.N%len(tasks)]
		want := 0.0
		switch code := model.Write(task, e.N); {
		case code == task.solve():
			want = 1
		case code == "raise SystemExit('model gave up')":
			want = -1
		}
		if e.Err == nil && e.Reward != want {
			t.Errorf("episode %d (%s): reward %v, want %v", e.N, task.Name, e.Reward, want)
		}
	}
	var claims extv1beta1.SandboxClaimList
	if err := st.Client.List(ctx, &claims, client.InNamespace(st.Namespace)); err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			live++
		}
	}
	if live != 0 {
		t.Errorf("%d claims left after the rollout, want 0", live)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if os.Getenv("ROLLOUT_TEST_LOGS") != "" {
		w.t.Log(string(p))
	}
	return len(p), nil
}

package scale_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/examples/agent-sandbox-rl/rollout"
	"sigs.k8s.io/agent-sandbox/internal/bench"
)

// BenchmarkRLRollout runs the examples/agent-sandbox-rl harness on the kwok
// stack: AGENT_SANDBOX_RL_EPISODES (default 500) episodes started at
// AGENT_SANDBOX_RL_RATE (default 20) per second, each claiming a fresh warm
// sandbox through the Go SDK and releasing it, with the pool sized from
// the rate (rollout.PoolSize). kwok pods run nothing, so the episodes are
// claim-only (the code-running episode is TestRolloutOnIntegrationStack's).
func BenchmarkRLRollout(b *testing.B) {
	episodes := envInt(b, "AGENT_SANDBOX_RL_EPISODES", 500)
	rate := float64(envInt(b, "AGENT_SANDBOX_RL_RATE", 20))
	for range b.N {
		st, cfg := startStack(b, 100)
		ctx := context.Background()
		ns := bench.ScaleNamespace(0)
		pool := rollout.PoolSize(rate, time.Second, 2*time.Second, 1.5)
		if _, err := bench.EnsurePools(ctx, st.Client, 1, pool, cfg.Timeout); err != nil {
			b.Fatal(err)
		}
		res, err := rollout.Run(ctx, rollout.Config{
			// Direct mode never dials before a request, and claim-only
			// episodes send none: the URL only satisfies the SDK.
			Options:  sandbox.Options{Namespace: ns, RestConfig: st.Config, APIURL: "http://127.0.0.1:9", Quiet: true},
			WarmPool: bench.ScalePoolName, Episodes: episodes, Rate: rate, Concurrency: 64, ClaimOnly: true,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("pool %d for %.0f episodes/s: %s (load %s)", pool, rate, res.Summary(), loadNow())
		b.ReportMetric(res.EpisodesPerSecond(), "episodes/s")
		b.ReportMetric(float64(res.ClaimPercentile(50))/1e6, "claim_p50_ms")
		b.ReportMetric(float64(res.ClaimPercentile(99))/1e6, "claim_p99_ms")
		b.ReportMetric(float64(res.Failed), "failed_episodes")
		b.ReportMetric(float64(pool), "pool_size")
	}
}

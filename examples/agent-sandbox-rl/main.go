// Command agent-sandbox-rl runs an RL-style rollout on agent-sandbox: many
// short episodes, each on a fresh warm sandbox claimed through the Go SDK,
// where a scripted model's Python code runs and is scored, and the sandbox
// is released afterwards. The warm pool is sized from the episode rate
// before the rollout starts. See README.md.
//
//	go run ./examples/agent-sandbox-rl --episodes 200 --rate 5
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/examples/agent-sandbox-rl/rollout"
)

func main() {
	var (
		kubeconfig  = flag.String("kubeconfig", "", "kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
		namespace   = flag.String("namespace", "default", "namespace of the warm pool and claims")
		pool        = flag.String("pool", "python-sandbox-pool", "warm pool to claim from")
		episodes    = flag.Int("episodes", 100, "episodes to run")
		rate        = flag.Float64("rate", 5, "episodes started per second (0: as fast as --concurrency allows)")
		concurrency = flag.Int("concurrency", 16, "episodes in flight at most")
		episodeTime = flag.Duration("episode-time", time.Second, "expected length of one episode, for sizing the pool")
		refillTime  = flag.Duration("refill-time", 2*time.Second, "how long the pool takes to replace a claimed sandbox, for sizing the pool")
		poolSize    = flag.Int("pool-size", 0, "warm pool size to set (0: from --rate, --episode-time and --refill-time)")
		routerURL   = flag.String("router-url", "", "reach sandboxes through this router URL (default: the SDK's port-forward tunnel)")
		claimOnly   = flag.Bool("claim-only", false, "claim and release only, run no code (simulated nodes, e.g. kwok)")
		accuracy    = flag.Float64("model-accuracy", 0.8, "how often the scripted model writes correct code")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, *kubeconfig, *namespace, *pool, *episodes, *rate, *concurrency, *episodeTime, *refillTime,
		*poolSize, *routerURL, *claimOnly, *accuracy)
	stop() // not deferred: os.Exit below would skip it
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-sandbox-rl:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, ns, pool string, episodes int, rate float64, concurrency int,
	episodeTime, refillTime time.Duration, poolSize int, routerURL string, claimOnly bool, accuracy float64) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	size := int32(poolSize)
	if size <= 0 {
		size = rollout.PoolSize(rate, episodeTime, refillTime, 1.5)
	}
	c, err := client.New(rc, client.Options{})
	if err != nil {
		return err
	}
	if err := extv1beta1.AddToScheme(c.Scheme()); err != nil {
		return err
	}
	if err := rollout.SetPoolReplicas(ctx, c, ns, pool, size); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "warm pool %s/%s sized to %d for %.1f episodes/s\n", ns, pool, size, rate)
	opts := sandbox.Options{Namespace: ns, RestConfig: rc, APIURL: routerURL, Quiet: true}
	res, err := rollout.Run(ctx, rollout.Config{
		Options: opts, WarmPool: pool, Episodes: episodes, Rate: rate, Concurrency: concurrency,
		Model: rollout.ScriptedModel{Accuracy: accuracy, Seed: 1}, ClaimOnly: claimOnly,
	})
	if err != nil {
		return err
	}
	for _, e := range res.Episodes {
		if e.Err != nil {
			fmt.Fprintf(os.Stderr, "episode %d (%s): %v\n", e.N, e.Task, e.Err)
		}
	}
	fmt.Println(res.Summary())
	return nil
}

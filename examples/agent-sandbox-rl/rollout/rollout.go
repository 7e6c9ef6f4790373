// Package rollout is an RL-style rollout harness on agent-sandbox: many
// short episodes, each on a fresh warm sandbox claimed through the Go SDK
// (clients/go/sandbox). In an episode a (scripted) model writes Python code
// for a task, the code runs in the sandbox, its output is scored against
// the task's answer, and the sandbox is released (its claim deleted), so no
// episode ever sees another's state. The warm pool is sized from the
// episode rate (PoolSize), so claims are served from warm sandboxes.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
)

// Task is one problem: a prompt for the model and its expected answer.
type Task struct {
	Name   string
	Prompt string
	Answer string
	// solve returns correct code; bug returns plausible wrong code.
	solve, bug func() string
}

// Tasks are the problems episodes cycle through.
func Tasks() []Task {
	return []Task{
		{Name: "sum-squares", Prompt: "Print the sum of the squares of 1..100.", Answer: "338350",
			solve: func() string { return "print(sum(i*i for i in range(1, 101)))" },
			bug:   func() string { return "print(sum(i*i for i in range(1, 100)))" }},
		{Name: "fibonacci", Prompt: "Print the 30th Fibonacci number (F1 = F2 = 1).", Answer: "832040",
			solve: func() string { return "a, b = 0, 1\nfor _ in range(30):\n    a, b = b, a + b\nprint(a)" },
			bug:   func() string { return "a, b = 1, 1\nfor _ in range(30):\n    a, b = b, a + b\nprint(a)" }},
		{Name: "primes", Prompt: "Print how many primes are below 1000.", Answer: "168",
			solve: func() string {
				return "print(sum(1 for n in range(2, 1000) if all(n % d for d in range(2, int(n**0.5) + 1))))"
			},
			bug: func() string { return "print(sum(1 for n in range(1, 1000) if all(n % d for d in range(2, n))))" }},
		{Name: "reverse", Prompt: "Print 'agent-sandbox' reversed.", Answer: "xobdnas-tnega",
			solve: func() string { return "print('agent-sandbox'[::-1])" },
			bug:   func() string { return "print(''.join(sorted('agent-sandbox')))" }},
	}
}

// Model writes code for a task. Episode numbers make it deterministic.
type Model interface {
	Write(t Task, episode int) string
}

// ScriptedModel answers correctly with probability Accuracy and otherwise
// writes a plausible bug (or, one time in ten of those, code that raises),
// seeded per episode so a run is reproducible.
type ScriptedModel struct {
	Accuracy float64
	Seed     uint64
}

// Write implements Model.
func (m ScriptedModel) Write(t Task, episode int) string {
	r := rand.New(rand.NewPCG(m.Seed, uint64(episode)))
	switch p := r.Float64(); {
	case p < m.Accuracy:
		return t.solve()
	case p < m.Accuracy+(1-m.Accuracy)*0.1:
		return "raise SystemExit('model gave up')"
	default:
		return t.bug()
	}
}

// Score is the reward of one execution: 1 for the exact answer, 0 for a
// wrong one, -1 when the code failed (non-zero exit).
func Score(t Task, res *sandbox.ExecutionResult) float64 {
	if res == nil || res.ExitCode != 0 {
		return -1
	}
	if strings.TrimSpace(res.Stdout) == t.Answer {
		return 1
	}
	return 0
}

// PoolSize is how many warm sandboxes keep a rate of episodes/s served
// warm: by Little's law the sandboxes out of the pool at once are
// rate × (episode time + refill time), where the refill time is how long
// the pool takes to replace a claimed sandbox; headroom (e.g. 1.5) covers
// bursts of the arrivals. At least 1.
func PoolSize(rate float64, episode, refill time.Duration, headroom float64) int32 {
	if rate <= 0 {
		return 1
	}
	n := math.Ceil(rate * (episode + refill).Seconds() * math.Max(headroom, 1))
	return int32(max(1, min(n, math.MaxInt32)))
}

// SetPoolReplicas sets the warm pool's size.
func SetPoolReplicas(ctx context.Context, c client.Client, namespace, pool string, replicas int32) error {
	p := &extv1beta1.SandboxWarmPool{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: pool}, p); err != nil {
		return fmt.Errorf("warm pool %s/%s: %w", namespace, pool, err)
	}
	p.Spec.Replicas = ptr.To(replicas)
	if err := c.Update(ctx, p); err != nil {
		return fmt.Errorf("sizing warm pool %s/%s to %d: %w", namespace, pool, replicas, err)
	}
	return nil
}

// Config describes a rollout.
type Config struct {
	// Options are the SDK options of every episode's sandbox (connection,
	// namespace, kubeconfig); WarmPoolName is set from WarmPool.
	Options  sandbox.Options
	WarmPool string
	Episodes int
	// Rate starts episodes at this many per second (0: as fast as
	// Concurrency allows).
	Rate float64
	// Concurrency bounds the episodes in flight (default 8).
	Concurrency int
	Model       Model
	// ClaimOnly skips writing and running code: the episode is claim,
	// Ready, release. For simulated nodes (kwok), where no pod runs
	// anything; the reward is then not measured.
	ClaimOnly bool
}

// Episode is what one episode did.
type Episode struct {
	N      int
	Task   string
	Reward float64
	// Claim is from asking for a sandbox to holding an open one.
	Claim time.Duration
	// Total is the whole episode, release included.
	Total time.Duration
	Err   error
}

// Result summarises a rollout.
type Result struct {
	Episodes   []Episode
	Elapsed    time.Duration
	Failed     int
	MeanReward float64
}

// EpisodesPerSecond is the completed episodes per second of wall time.
func (r *Result) EpisodesPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Episodes)-r.Failed) / r.Elapsed.Seconds()
}

// ClaimPercentile is the nearest-rank p-th percentile of claim latency
// over successful episodes.
func (r *Result) ClaimPercentile(p float64) time.Duration {
	var ds []time.Duration
	for _, e := range r.Episodes {
		if e.Err == nil {
			ds = append(ds, e.Claim)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	sortDurations(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[max(rank, 1)-1]
}

func sortDurations(ds []time.Duration) {
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && ds[j] < ds[j-1]; j-- {
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
}

// Run runs the rollout. A failed episode is recorded and the rollout goes
// on; Run fails only on bad configuration or a cancelled context.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Episodes <= 0 || cfg.WarmPool == "" {
		return nil, errors.New("rollout: need episodes > 0 and a warm pool")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Model == nil {
		cfg.Model = ScriptedModel{Accuracy: 0.8, Seed: 1}
	}
	opts := cfg.Options
	opts.WarmPoolName = cfg.WarmPool
	if opts.K8sHelper == nil {
		h, err := sandbox.NewK8sHelper(opts.RestConfig, logr.Discard())
		if err != nil {
			return nil, fmt.Errorf("rollout: kubernetes clients: %w", err)
		}
		opts.K8sHelper = h
	}
	tasks := Tasks()
	res := &Result{Episodes: make([]Episode, cfg.Episodes)}
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cfg.Episodes {
		if cfg.Rate > 0 {
			at := start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))
			select {
			case <-time.After(time.Until(at)):
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return nil, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			res.Episodes[i] = runEpisode(ctx, opts, cfg, tasks[i%len(tasks)], i)
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var sum float64
	for _, e := range res.Episodes {
		if e.Err != nil {
			res.Failed++
			continue
		}
		sum += e.Reward
	}
	if ok := len(res.Episodes) - res.Failed; ok > 0 {
		res.MeanReward = sum / float64(ok)
	}
	return res, nil
}

func runEpisode(ctx context.Context, opts sandbox.Options, cfg Config, t Task, n int) (ep Episode) {
	ep = Episode{N: n, Task: t.Name}
	start := time.Now()
	defer func() { ep.Total = time.Since(start) }()
	sb, err := sandbox.New(ctx, opts)
	if err != nil {
		ep.Err = err
		return ep
	}
	if err := sb.Open(ctx); err != nil {
		ep.Err = fmt.Errorf("episode %d: claiming: %w", n, err)
		_ = sb.Close(context.Background())
		return ep
	}
	ep.Claim = time.Since(start)
	// Release on every path: the sandbox is never reused by another
	// episode; the pool refills with a fresh one.
	defer func() {
		if err := sb.Close(context.Background()); err != nil && ep.Err == nil {
			ep.Err = fmt.Errorf("episode %d: releasing: %w", n, err)
		}
	}()
	if cfg.ClaimOnly {
		return ep
	}
	code := cfg.Model.Write(t, n)
	if err := sb.Write(ctx, "episode.py", []byte(code+"\n")); err != nil {
		ep.Err = fmt.Errorf("episode %d: writing code: %w", n, err)
		return ep
	}
	out, err := sb.Run(ctx, "python3 episode.py")
	if err != nil {
		ep.Err = fmt.Errorf("episode %d: running code: %w", n, err)
		return ep
	}
	ep.Reward = Score(t, out)
	return ep
}

// Summary is a one-line report of r.
func (r *Result) Summary() string {
	return fmt.Sprintf("%d episodes (%d failed) in %s: %.2f episodes/s, claim p50 %s p99 %s, mean reward %s",
		len(r.Episodes), r.Failed, r.Elapsed.Round(time.Millisecond), r.EpisodesPerSecond(),
		r.ClaimPercentile(50).Round(time.Millisecond), r.ClaimPercentile(99).Round(time.Millisecond),
		strconv.FormatFloat(r.MeanReward, 'f', 3, 64))
}

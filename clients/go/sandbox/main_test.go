package sandbox

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/devstack"
	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// The tests use two real backends, each started on first use so that
// `go test -run Unit`-style selections start nothing:
//
//   - sharedEnv: a bare kube-apiserver + etcd with the CRDs and no
//     controllers, where lifecycle tests play the controller themselves to
//     drive every edge (never-bound claims, deleted sandboxes, failing
//     deletes);
//   - sharedStack: the full devstack (controllers, router, sandboxd
//     processes) for end-to-end tests through every connection strategy.
var (
	envOnce sync.Once
	env     *testenv.Env
	envErr  error

	stackOnce sync.Once
	stack     *devstack.Stack
	stackErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping test apiserver: %v\n", err)
		}
	}
	if stack != nil {
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping devstack: %v\n", err)
		}
	}
	os.Exit(code)
}

func sharedEnv(t *testing.T) *testenv.Env {
	t.Helper()
	testenv.SkipShort(t)
	envOnce.Do(func() { env, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatalf("starting test apiserver: %v", envErr)
	}
	return env
}

func sharedStack(t *testing.T) *devstack.Stack {
	t.Helper()
	testenv.SkipShortNeeds(t, "the devstack (apiserver, controller, router, sandboxd)")
	stackOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var log *os.File
		if os.Getenv("DEVSTACK_LOG") != "" {
			log = os.Stderr
		}
		opts := devstack.Options{}
		if log != nil {
			opts.Log = log
		}
		stack, stackErr = devstack.Start(ctx, opts)
	})
	if stackErr != nil {
		t.Fatalf("starting devstack: %v", stackErr)
	}
	return stack
}

package extensions_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest/harness"
	"sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// TestKubectlScale drives the pool through its scale subresource with the
// real kubectl, as an HPA would, and reads the scale back.
func TestKubectlScale(t *testing.T) {
	testenv.SkipShort(t)
	exttest.StartKubelet(t, env, nil, nil)
	harness.StartManager(t, env, harness.ManagerOptions{Extensions: defaultOpts})
	c := env.Client
	ns := exttest.Namespace(t, c, "scale")
	exttest.Create(t, c, exttest.NewTemplate(ns, "tmpl"), exttest.NewPool(ns, "pool", "tmpl", 1))
	exttest.Eventually(t, time.Minute, func() error { return exttest.PoolReady(c, ns, "pool", 1) })

	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(env.AssetsDir, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig, "-n", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	kubectl("scale", "sandboxwarmpool/pool", "--replicas=4")
	exttest.Eventually(t, time.Minute, func() error { return exttest.PoolReady(c, ns, "pool", 4) })
	got := kubectl("get", "--raw", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/"+ns+"/sandboxwarmpools/pool/scale")
	for _, want := range []string{`"replicas":4`, labels.WarmPoolSandbox + "=" + labels.NameHash("pool")} {
		if !contains(got, want) {
			t.Errorf("scale subresource %s lacks %s", got, want)
		}
	}
	kubectl("scale", "swp/pool", "--replicas=0")
	exttest.Eventually(t, time.Minute, func() error { return exttest.PoolReady(c, ns, "pool", 0) })
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

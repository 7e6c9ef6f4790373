package localcluster

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The cpu agent is a component with its own identity that may only read
// Pods, and selects the controller by namespace and service account; etcd
// and the apiserver ask for the real-time class only once Up gave their
// group a budget.
func TestCPUAgentComponent(t *testing.T) {
	c := New(DefaultConfig(), nil)
	c.bins = binaries{CPUAgent: c.cfg.cpuAgentBinary()}
	if !slices.Contains(Components, compCPUAgent) {
		t.Fatal("the cpu agent is not a component: up would not start it nor down stop it")
	}
	args := strings.Join(c.spec(compCPUAgent).args, " ")
	for _, want := range []string{
		"--pods=agent-sandbox-system/agent-sandbox-controller",
		"--cgroup-root=/agent-sandbox",
		"--runtime=300ms", "--period=1s",
		"--node-name=" + c.cfg.NodeName,
		"--kubeconfig=" + filepath.Join(c.cfg.pkiDir(), cpuAgentConf),
	} {
		if !strings.Contains(args, want) {
			t.Errorf("agent args %q lack %q", args, want)
		}
	}
	c.cfg.RealtimePods = []string{"ns/sa"}
	if args := strings.Join(c.spec(compCPUAgent).args, " "); !strings.Contains(args, "--pods=ns/sa") || strings.Contains(args, "agent-sandbox-controller") {
		t.Errorf("RealtimePods not passed: %q", args)
	}
	if cert := cpuAgentCert(); cert.cn != cpuAgentUser || len(cert.orgs) != 0 || cert.server {
		t.Errorf("agent certificate %+v", cert)
	}
	if !slices.ContainsFunc(c.cfg.leafSpecs(), func(s certSpec) bool { return s.name == compCPUAgent }) {
		t.Error("no certificate is issued for the agent")
	}
	if kubeconfigUsers[cpuAgentConf] != compCPUAgent {
		t.Error("no kubeconfig is written for the agent")
	}
	if !strings.Contains(c.addonManifests(), "name: agent-sandbox:cpu-agent") {
		t.Error("the add-on manifests lack the agent's RBAC")
	}
	checkClusterRoleRules(t, cpuAgentRBAC, map[string][]string{"pods": {"get", "list", "watch"}})

	for _, name := range []string{compEtcd, compAPIServer} {
		if c.spec(name).realtime {
			t.Errorf("%s asks for the real-time class before its group has a budget", name)
		}
	}
	c.realtime = true
	for _, name := range Components {
		if want := name == compEtcd || name == compAPIServer; c.spec(name).realtime != want {
			t.Errorf("%s: realtime %v, want %v", name, c.spec(name).realtime, want)
		}
	}
}

package localcluster

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The node agent drives the same runsc (and state root) as the shim, under
// its own identity in the group the hibernation admission policy trusts,
// with a ClusterRole that only reads and patches Pods.
func TestHibernateAgentComponent(t *testing.T) {
	c := New(DefaultConfig(), nil)
	c.bins = binaries{Runsc: "/cache/gvisor/runsc", HibernateAgent: c.cfg.hibernateAgentBinary()}
	if !slices.Contains(Components, compHibernateAgent) {
		t.Fatal("the agent is not a component: up would not start it nor down stop it")
	}
	spec := c.spec(compHibernateAgent)
	args := strings.Join(spec.args, " ")
	for _, want := range []string{
		"--runsc=/cache/gvisor/runsc",
		"--runsc-root=" + filepath.Join(c.cfg.runscRoot(), "k8s.io"),
		"--store=" + c.cfg.HibernateDir(),
		"--node-name=" + c.cfg.NodeName,
		"--kubeconfig=" + filepath.Join(c.cfg.pkiDir(), hibernateAgentConf),
	} {
		if !strings.Contains(args, want) {
			t.Errorf("agent args %q lack %q", args, want)
		}
	}
	if !strings.Contains(c.runscConfig(), `root = "`+c.cfg.runscRoot()+`"`) {
		t.Errorf("the shim's runsc root is not %s:\n%s", c.cfg.runscRoot(), c.runscConfig())
	}
	cert := hibernateAgentCert()
	if cert.cn != hibernateAgentUser || !slices.Equal(cert.orgs, []string{"agents.x-k8s.io:hibernate-agents"}) || cert.server {
		t.Errorf("agent certificate %+v", cert)
	}
	if !slices.ContainsFunc(c.cfg.leafSpecs(), func(s certSpec) bool { return s.name == compHibernateAgent }) {
		t.Error("no certificate is issued for the agent")
	}
	if kubeconfigUsers[hibernateAgentConf] != compHibernateAgent {
		t.Error("no kubeconfig is written for the agent")
	}
	checkClusterRoleRules(t, hibernateAgentRBAC, map[string][]string{"pods": {"get", "list", "watch", "patch"}, "sandboxes": {"get"}})
}

// checkClusterRoleRules: the manifest's ClusterRole has one rule per
// resource in allowed, each with one resource and only the allowed verbs.
func checkClusterRoleRules(t *testing.T, manifest string, allowed map[string][]string) {
	t.Helper()
	objs, err := decodeManifests([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	roles := 0
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" {
			continue
		}
		roles++
		rules, _, _ := unstructuredSlice(o.Object, "rules")
		if len(rules) != len(allowed) {
			t.Fatalf("%s rules %v, want one per resource of %v", o.GetName(), rules, allowed)
		}
		for _, rule := range rules {
			r := rule.(map[string]any)
			res := r["resources"].([]any)
			if len(res) != 1 {
				t.Fatalf("%s rule %v", o.GetName(), r)
			}
			for _, v := range r["verbs"].([]any) {
				if !slices.Contains(allowed[res[0].(string)], v.(string)) {
					t.Errorf("%s may %s %s", o.GetName(), v, res[0])
				}
			}
		}
	}
	if roles != 1 {
		t.Errorf("%d ClusterRoles, want 1", roles)
	}
}

func unstructuredSlice(obj map[string]any, key string) ([]any, bool, error) {
	s, ok := obj[key].([]any)
	return s, ok, nil
}

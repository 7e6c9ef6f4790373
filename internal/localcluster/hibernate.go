package localcluster

import (
	"path/filepath"
)

// The deep-hibernation node agent (cmd/sandbox-hibernate-agent) is the local
// cluster's equivalent of the chart's DaemonSet: a host process, like the
// other node add-ons, because it drives the host's runsc against the shim's
// state root and writes the node-local store (HibernateDir) that the shim
// reads. It authenticates with its own client certificate (user
// system:agent-sandbox:hibernate-agent in group
// agents.x-k8s.io:hibernate-agents, the group the hibernation admission
// policy lets set the result annotations) and its ClusterRole allows only
// reading and patching Pods (and reading Sandboxes, to delete the
// snapshots of deleted ones).
const (
	compHibernateAgent  = "sandbox-hibernate-agent"
	hibernateAgentUser  = "system:agent-sandbox:hibernate-agent"
	hibernateAgentGroup = "agents.x-k8s.io:hibernate-agents"
	hibernateAgentConf  = "hibernate-agent.conf"
)

// hibernateAgentBinary is where hack/deps.sh builds the agent: its own
// directory, because <cache>/bin/sandbox-hibernate-agent is the binary the
// image builder (internal/images/platform) writes for the agent image.
func (c Config) hibernateAgentBinary() string {
	return filepath.Join(c.CacheDir, "bin", "hibernate-agent", compHibernateAgent)
}

// hibernateAgentCert is the agent's client certificate (see leafSpecs).
func hibernateAgentCert() certSpec {
	return certSpec{name: compHibernateAgent, cn: hibernateAgentUser, orgs: []string{hibernateAgentGroup}}
}

// hibernateAgentArgs point the agent at what the shim uses: the same runsc
// binary (a snapshot restores only with the runsc that took it), the
// shim's runsc root and containerd's task bundles for the k8s.io namespace.
func (c *Cluster) hibernateAgentArgs() []string {
	return []string{
		"--kubeconfig=" + filepath.Join(c.cfg.pkiDir(), hibernateAgentConf),
		"--node-name=" + c.cfg.NodeName,
		"--store=" + c.cfg.HibernateDir(),
		"--runsc=" + c.bins.Runsc,
		"--runsc-root=" + filepath.Join(c.cfg.runscRoot(), "k8s.io"),
		"--task-dir=" + filepath.Join(c.cfg.containerdState(), "io.containerd.runtime.v2.task", "k8s.io"),
	}
}

func (c *Cluster) hibernateAgentSpec() procSpec {
	return procSpec{name: compHibernateAgent, binary: c.bins.HibernateAgent, cpuGroup: cpuGroupNode,
		env:         []string{"PATH=" + basePath},
		configFiles: []string{filepath.Join(c.cfg.pkiDir(), hibernateAgentConf)},
		args:        c.hibernateAgentArgs(),
	}
}

// hibernateAgentRBAC: the agent watches the Pods of its node and patches the
// result annotations on them; nothing else. (Kubernetes RBAC cannot narrow
// this to one node's Pods; the agent filters by spec.nodeName, and the
// admission policy lets it change only the two result annotations.)
const hibernateAgentRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: agent-sandbox:hibernate-agent
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [agents.x-k8s.io]
  resources: [sandboxes]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: agent-sandbox:hibernate-agent
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sandbox:hibernate-agent"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "` + hibernateAgentUser + `"}
`

package localcluster

import (
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/agent-sandbox/internal/cpuclass"
)

// Real-time class. On a small node whose kernel does not preempt, a
// normal-class thread can wake up tens to hundreds of milliseconds late while
// pods start, whatever its cgroup weight (docs/performance.md, "Wake-ups on
// the node's kernel"). A warm claim waits on etcd, the apiserver and the
// controller in turn, so those three run in the real-time class (SCHED_RR),
// each group inside a real-time budget that bounds what it can take from
// the pods:
//
//	/agent-sandbox-control-plane  etcd and kube-apiserver: 600 ms per second per CPU
//	/agent-sandbox/.../<ctr>      the controller's container (and its parents): 300 ms per second
//
// The period is a second, not less: the three use about an eighth of a CPU
// on average while the pool refills, but in bursts (a garbage collection,
// a wave of watch events) of 60-100 ms within 100 ms; a 100 ms period
// throttled those bursts and stalled the claim path behind idle CPUs,
// a second lets them run through and throttles only a class that keeps
// more than its share for a whole second. A 10 ms period (same share) was
// measured too and changed nothing; likely (not traced) because the
// apiserver's budget then also pays for its collector's mark workers
// (docs/performance.md, 7 December).
//
// etcd and the apiserver are host processes Up starts (realtime.go); the
// controller is a Pod, so the node's cpu agent (cmd/sandbox-cpu-agent) grants
// it, selected by namespace and service account, again after every restart.
// Kernels without real-time group budgets (cgroup v2, or no RT_GROUP_SCHED)
// get neither: nothing would bound the real-time tasks there.
const (
	compCPUAgent   = "sandbox-cpu-agent"
	cpuAgentUser   = "system:agent-sandbox:cpu-agent"
	cpuAgentConf   = "cpu-agent.conf"
	rtPeriod       = time.Second
	rtControlPlane = 600 * time.Millisecond
	rtPod          = 300 * time.Millisecond
)

// KubeletCgroupRoot is the kubelet's cgroupRoot on the local node.
const KubeletCgroupRoot = "/" + cgroupName

// ControlPlaneCPUGroup is etcd's and the apiserver's CPU cgroup, relative
// to the cpu hierarchy's mount.
const ControlPlaneCPUGroup = "/" + cpuGroupControlPlane

// defaultRealtimePods is the identity of agent-sandbox's controller as its
// chart (and the reference's) installs it.
const defaultRealtimePods = "agent-sandbox-system/agent-sandbox-controller"

var controlPlaneBudget = cpuclass.Budget{Period: rtPeriod, Runtime: rtControlPlane}

// cpuAgentBinary is where hack/deps.sh builds the agent.
func (c Config) cpuAgentBinary() string {
	return filepath.Join(c.CacheDir, "bin", "cpu-agent", compCPUAgent)
}

func cpuAgentCert() certSpec { return certSpec{name: compCPUAgent, cn: cpuAgentUser} }

func (c *Cluster) cpuAgentSpec() procSpec {
	mnt, _, _ := cpuCgroupMount()
	args := []string{
		"--kubeconfig=" + filepath.Join(c.cfg.pkiDir(), cpuAgentConf),
		"--node-name=" + c.cfg.NodeName,
		"--cpu-cgroup=" + mnt,
		"--cgroup-root=" + KubeletCgroupRoot,
		"--period=" + rtPeriod.String(),
		"--runtime=" + rtPod.String(),
	}
	for _, p := range c.cfg.realtimePods() {
		args = append(args, "--pods="+p)
	}
	return procSpec{name: compCPUAgent, binary: c.bins.CPUAgent, cpuGroup: cpuGroupNode,
		env:         []string{"PATH=" + basePath},
		configFiles: []string{filepath.Join(c.cfg.pkiDir(), cpuAgentConf)},
		args:        args,
	}
}

func (c Config) realtimePods() []string {
	if c.RealtimePods != nil {
		return c.RealtimePods
	}
	return []string{defaultRealtimePods}
}

// cpuAgentRBAC: the agent reads the Pods of its node to find the selected
// ones' UIDs and container IDs; nothing else.
var cpuAgentRBAC = strings.ReplaceAll(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: agent-sandbox:cpu-agent
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: agent-sandbox:cpu-agent
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sandbox:cpu-agent"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "USER"}
`, "USER", cpuAgentUser)

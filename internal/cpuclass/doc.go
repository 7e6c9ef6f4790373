// Package cpuclass puts chosen processes in the kernel's real-time
// scheduling class (SCHED_RR) on the local cluster's node, inside the
// real-time budgets of their CPU cgroups.
//
// Why: on a small node whose kernel does not preempt (PREEMPT_NONE, as in
// many cloud VM images) a normal-class thread can wake tens to hundreds of
// milliseconds after its timer or socket is ready while pods start, whatever
// its cgroup weight or nice value (docs/performance.md, "Wake-ups on the
// node's kernel"). A warm claim is a chain of wake-ups (apiserver, etcd,
// controller, apiserver again), so those processes are the ones that need
// to be woken promptly.
//
// Bounds: with real-time group scheduling (cgroup v1's cpu.rt_runtime_us) a
// real-time task may only run in a cgroup whose budget, and every
// ancestor's, is above zero, and it is throttled once its group used the
// budget within a period. The budgets written here are therefore the upper
// bound of what the real-time processes can take from the pods; a kernel
// without group budgets is left alone (Supported).
//
// Who: Pods get the class by identity, never by labels: the Pod's namespace
// and service account (only someone allowed to create Pods in that
// namespace can run one as that account) select it, its UID (assigned by the
// apiserver) finds its cgroup, and only the containers the kubelet reports
// for it are touched (agent.go).
package cpuclass

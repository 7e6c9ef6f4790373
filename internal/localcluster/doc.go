// Package localcluster runs a real single-node Kubernetes cluster on this
// machine: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd and kubelet, built from source by hack/deps.sh, with pods
// isolated by gVisor (RuntimeClass "gvisor", handler runsc) or runc.
//
// It owns everything needed to bring that cluster up and to take it away
// again without a trace: PKI and kubeconfigs (generated in Go), component
// configuration, the node network (a dummy interface for the node IP, a
// bridge for pods, a few iptables rules in chains of its own), the cgroup
// root, the pause image, and the processes themselves.
//
// Components run detached (own session) and are tracked by pid files, so
// `agent-sandbox up` returns while the cluster keeps running and a later
// `up`, `down` or `status` process finds them. Up is idempotent: it reuses
// healthy components, restarts dead ones and restarts any whose binary or
// configuration changed. Down stops everything and removes the mounts,
// network namespaces, iptables rules, cgroups and interfaces it made, and
// restores the sysctls the kubelet changed.
package localcluster

package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
)

// binaries are the absolute paths of every program the cluster runs.
type binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kubelet, Kubectl string
	Containerd, ShimRunc, Ctr                                       string
	Runsc, ShimRunsc                                                string
	Pause                                                           string
	HibernateAgent, CPUAgent                                        string
	KubeProxy, CoreDNS, KubeRouter, LocalPath                       string
	Runc, IP, Iptables, Ipset, Busybox                              string
	CNIBinDir                                                       string
}

const depsFix = "run `make deps` (hack/deps.sh); the first build takes 15-25 min on 2 cores, later runs are a no-op"

// locateBinaries finds every binary, or explains which one is missing and
// how to get it.
func (c Config) locateBinaries() (binaries, error) {
	kb, cb, gb := c.kubeBinDir(), c.containerdBinDir(), c.gvisorBinDir()
	b := binaries{
		Etcd:              filepath.Join(kb, "etcd"),
		APIServer:         filepath.Join(kb, "kube-apiserver"),
		ControllerManager: filepath.Join(kb, "kube-controller-manager"),
		Scheduler:         filepath.Join(kb, "kube-scheduler"),
		Kubelet:           filepath.Join(kb, "kubelet"),
		Kubectl:           filepath.Join(kb, "kubectl"),
		Containerd:        filepath.Join(cb, "containerd"),
		ShimRunc:          filepath.Join(cb, "containerd-shim-runc-v2"),
		Ctr:               filepath.Join(cb, "ctr"),
		Runsc:             filepath.Join(gb, "runsc"),
		ShimRunsc:         filepath.Join(gb, "containerd-shim-runsc-v1"),
		Pause:             c.pauseBinary(),
		HibernateAgent:    c.hibernateAgentBinary(),
		CPUAgent:          c.cpuAgentBinary(),
		KubeProxy:         filepath.Join(kb, "kube-proxy"),
		CoreDNS:           filepath.Join(c.addonBinDir("coredns", CoreDNSVersion), "coredns"),
		KubeRouter:        filepath.Join(c.addonBinDir("kube-router", KubeRouterVersion), "kube-router"),
		LocalPath:         filepath.Join(c.addonBinDir("local-path-provisioner", LocalPathVersion), "local-path-provisioner"),
	}
	// The hibernation shim is the stock gVisor shim plus a restore extension
	// that stays inert unless a Pod carries the controller-set restore
	// annotation; use it when hack/gvisor/build.sh has built it, so a cache
	// from before it existed still brings the cluster up (without restore).
	if p := filepath.Join(gb, "containerd-shim-runsc-hibernate-v1"); isExecutable(p) {
		b.ShimRunsc = p
	}
	for _, p := range []string{b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler, b.Kubelet, b.Kubectl,
		b.Containerd, b.ShimRunc, b.Ctr, b.Runsc, b.ShimRunsc, b.Pause, b.HibernateAgent, b.CPUAgent,
		b.KubeProxy, b.CoreDNS, b.KubeRouter, b.LocalPath} {
		if !isExecutable(p) {
			return b, userError(nil, depsFix, "%s is not built (looked for %s)", filepath.Base(p), p)
		}
	}
	// Debian packages (installed by hack/deps.sh).
	for _, t := range []struct {
		dst  *string
		name string
		pkg  string
	}{{&b.Runc, "runc", "runc"}, {&b.IP, "ip", "iproute2"}, {&b.Iptables, "iptables", "iptables"},
		{&b.Ipset, "ipset", "ipset"}, {&b.Busybox, "busybox", "busybox-static"}} {
		p, err := lookPath(t.name)
		if err != nil {
			return b, userError(nil, depsFix+" (it installs the Debian package "+t.pkg+")", "%s is not installed", t.name)
		}
		*t.dst = p
	}
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if isExecutable(filepath.Join(d, "bridge")) && isExecutable(filepath.Join(d, "host-local")) {
			b.CNIBinDir = d
			break
		}
	}
	if b.CNIBinDir == "" {
		return b, userError(nil, depsFix+" (it installs the Debian package containernetworking-plugins)",
			"the CNI bridge and host-local plugins are not installed")
	}
	return b, nil
}

// lookPath is exec.LookPath plus the sbin directories, which a non-login
// root shell (sudo, CI) may lack on PATH.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

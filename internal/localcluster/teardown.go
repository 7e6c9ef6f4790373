package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// removeAllPods stops and removes every pod sandbox through CRI, which runs
// the CNI DEL (addresses released, veths gone), kills the containers and
// their shims and unmounts their filesystems. If containerd is not running
// but pods were left behind (it crashed), it is started just for this.
func (c *Cluster) removeAllPods(ctx context.Context, rec *procRecord) error {
	if !rec.alive() {
		if !c.hasPodLeftovers() {
			return nil
		}
		bins, err := c.cfg.locateBinaries()
		if err != nil {
			return err
		}
		c.bins = bins
		if _, err := os.Stat(c.containerdConfigPath()); err != nil {
			return fmt.Errorf("containerd config missing: %w", err)
		}
		r, err := c.cfg.startDetached(c.containerdSpec())
		if err != nil {
			return err
		}
		defer stopProcess(r.rec, 15*time.Second)
		if err := c.waitHealthy(ctx, compContainerd, r, 30*time.Second); err != nil {
			return err
		}
	}
	conn, rt, err := c.dialCRI()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, sb := range list.GetItems() {
		g.Go(func() error {
			if _, err := rt.StopPodSandbox(gctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
				return fmt.Errorf("stop pod %s/%s: %w", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err)
			}
			if _, err := rt.RemovePodSandbox(gctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
				return fmt.Errorf("remove pod %s/%s: %w", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if n := len(list.GetItems()); n > 0 {
		c.step("pods: removed %d pod sandboxes (%.1fs)", n, time.Since(start).Seconds())
	}
	return nil
}

// hasPodLeftovers reports whether pod network namespaces or runtime
// processes remain.
func (c *Cluster) hasPodLeftovers() bool {
	if ents, err := os.ReadDir(c.cfg.netnsDir()); err == nil && len(ents) > 0 {
		return true
	}
	return len(c.runtimeProcesses()) > 0
}

// runtimeProcesses are the processes of the node's runtime that are not
// components: containerd shims and gVisor (sandbox, gofer, stubs), found by
// their executable in our build cache, plus every process in our cgroups
// (the pods' own processes). The Kubernetes binaries are not matched: other
// tools (envtest) run the same apiserver and etcd binaries.
func (c *Cluster) runtimeProcesses() []int {
	dirs := []string{c.cfg.containerdBinDir() + "/", c.cfg.gvisorBinDir() + "/"}
	components := map[int]bool{}
	for _, name := range Components {
		if rec, _ := c.cfg.readRecord(name); rec.alive() {
			components[rec.PID] = true
		}
	}
	seen := map[int]bool{}
	var out []int
	add := func(pid int) {
		if !seen[pid] && !components[pid] && pid != os.Getpid() {
			seen[pid] = true
			out = append(out, pid)
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(exe, d) {
				add(pid)
				break
			}
		}
	}
	for _, pid := range cgroupPIDs() {
		add(pid)
	}
	return out
}

// killLeftovers SIGKILLs runtime processes that survived the CRI teardown
// (e.g. after containerd crashed) and waits briefly for them to go.
func (c *Cluster) killLeftovers() {
	for range 20 {
		pids := c.runtimeProcesses()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Leftovers describes what of the cluster remains on the host. After Down
// every field must be empty; the e2e tests check exactly that.
type Leftovers struct {
	Processes  []string // "pid exe"
	Mounts     []string
	Interfaces []string
	Iptables   []string // rules or chains naming ours (or kube-proxy's/kube-router's KUBE-*)
	IPSets     []string // kube-router's
	Cgroups    []string
	NetNS      []string
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool {
	return len(l.Processes)+len(l.Mounts)+len(l.Interfaces)+len(l.Iptables)+len(l.IPSets)+len(l.Cgroups)+len(l.NetNS) == 0
}

// FindLeftovers inspects the host for anything of this cluster.
func (c *Cluster) FindLeftovers() (Leftovers, error) {
	var l Leftovers
	var errs []error
	for _, name := range Components {
		if rec, _ := c.cfg.readRecord(name); rec.alive() {
			l.Processes = append(l.Processes, fmt.Sprintf("%d %s", rec.PID, name))
		}
	}
	for _, pid := range c.runtimeProcesses() {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		l.Processes = append(l.Processes, fmt.Sprintf("%d %s", pid, exe))
	}
	ms, err := mountsUnder(c.cfg.StateDir, c.cfg.RunDir, "/run/containerd")
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range ms {
		l.Mounts = append(l.Mounts, m.mountPoint)
	}
	ifaces, err := os.ReadDir("/sys/class/net")
	if err != nil {
		errs = append(errs, err)
	}
	for _, i := range ifaces {
		if i.Name() == c.cfg.Bridge {
			l.Interfaces = append(l.Interfaces, i.Name())
		}
		// veths of our pods are attached to our bridge
		if master, err := os.Readlink(filepath.Join("/sys/class/net", i.Name(), "master")); err == nil && filepath.Base(master) == c.cfg.Bridge {
			l.Interfaces = append(l.Interfaces, i.Name())
		}
	}
	if ipt, err := lookPath("iptables-save"); err == nil {
		out, err := run(ipt)
		if err != nil {
			errs = append(errs, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, chainPrefix) || strings.Contains(line, c.cfg.Bridge) || strings.Contains(line, addonChainPrefix) ||
				strings.Contains(line, c.cfg.PodCIDR.String()) || strings.Contains(line, "CNI-") {
				l.Iptables = append(l.Iptables, line)
			}
		}
	}
	if ip6t, err := lookPath("ip6tables-save"); err == nil {
		if out, err := run(ip6t); err == nil { // fails without IPv6 netfilter: then nothing was installed
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, addonChainPrefix) || strings.Contains(line, chainPrefix) {
					l.Iptables = append(l.Iptables, "ip6: "+line)
				}
			}
		}
	}
	if ipset, err := lookPath("ipset"); err == nil {
		out, err := run(ipset, "list", "-n")
		if err != nil {
			errs = append(errs, err)
		}
		for _, n := range strings.Fields(out) {
			if kubeRouterIPSet(n) {
				l.IPSets = append(l.IPSets, n)
			}
		}
	}
	mounts, _ := cgroupMounts()
	for _, m := range mounts {
		for _, g := range []string{cgroupName, cpuGroupControlPlane, cpuGroupNode} {
			if _, err := os.Stat(filepath.Join(m, g)); err == nil {
				l.Cgroups = append(l.Cgroups, filepath.Join(m, g))
			}
		}
	}
	if ents, err := os.ReadDir(c.cfg.netnsDir()); err == nil {
		for _, e := range ents {
			l.NetNS = append(l.NetNS, filepath.Join(c.cfg.netnsDir(), e.Name()))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return l, errors.Join(errs...)
}

// containerLogsDir is where the kubelet links every container's log (fixed
// in the kubelet, not configurable).
const containerLogsDir = "/var/log/containers"

// removeContainerLogLinks removes the kubelet's links to our pod logs, which
// remain when pods are removed behind the kubelet's back, and the directory
// itself if that leaves it empty.
func (c *Cluster) removeContainerLogLinks() error {
	ents, err := os.ReadDir(containerLogsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", containerLogsDir, err)
	}
	prefix := c.cfg.podLogsDir() + "/"
	for _, e := range ents {
		p := filepath.Join(containerLogsDir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, prefix) {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("remove %s: %w", p, err)
			}
		}
	}
	_ = syscall.Rmdir(containerLogsDir) // only succeeds when empty
	return nil
}

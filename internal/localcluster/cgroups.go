package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The kubelet runs with cgroupRoot=/agent-sandbox, so every pod cgroup lives
// under that one directory in each hierarchy. The kubelet insists that its
// cgroup root exists, so Up creates it; Down kills whatever is left inside
// and removes the whole subtree.

// cgroupMounts returns the mount points of the cgroup hierarchies (v1
// controllers, named v1 hierarchies and the v2 unified tree).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, ok := parseMountinfo(sc.Text())
		if ok && (m.fstype == "cgroup" || m.fstype == "cgroup2") {
			out = append(out, m.mountPoint)
		}
	}
	return out, sc.Err()
}

func isCgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// ensureCgroupRoot creates /<cgroupName> in every hierarchy. On cgroup v1
// a new cpuset cgroup is unusable until cpus and mems are set, so they are
// copied from the parent.
func ensureCgroupRoot() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return userError(nil, "mount cgroup filesystems under /sys/fs/cgroup", "no cgroup hierarchy is mounted")
	}
	for _, m := range mounts {
		dir := filepath.Join(m, cgroupName)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "cpuset.cpus")); err == nil && !isCgroupV2() {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				cur, _ := os.ReadFile(filepath.Join(dir, f))
				if strings.TrimSpace(string(cur)) != "" {
					continue
				}
				parent, err := os.ReadFile(filepath.Join(m, f))
				if err != nil {
					return fmt.Errorf("read %s: %w", filepath.Join(m, f), err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
					return fmt.Errorf("init %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	if isCgroupV2() {
		// Let the kubelet use every controller below our root.
		ctrls, _ := os.ReadFile("/sys/fs/cgroup/" + cgroupName + "/cgroup.controllers")
		var enable []string
		for _, c := range strings.Fields(string(ctrls)) {
			enable = append(enable, "+"+c)
		}
		if len(enable) > 0 {
			_ = os.WriteFile("/sys/fs/cgroup/"+cgroupName+"/cgroup.subtree_control", []byte(strings.Join(enable, " ")), 0o644)
		}
	}
	return nil
}

// cgroupPIDs lists the processes in our cgroup subtree (any hierarchy).
func cgroupPIDs() []int {
	mounts, _ := cgroupMounts()
	seen := map[int]bool{}
	var pids []int
	for _, m := range mounts {
		root := filepath.Join(m, cgroupName)
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil //nolint:nilerr // best effort: a group that vanished mid-walk holds no processes
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroupRoot kills any process left in our cgroups (pod processes
// whose runtime died) and removes the subtree, deepest directories first.
func removeCgroupRoot() error {
	for range 20 {
		pids := cgroupPIDs()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, cgroupName)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs) // children before parents
		for _, d := range dirs {
			if err := rmdirRetry(d); err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup directory; the kernel may report EBUSY for a
// moment after its last task exited.
func rmdirRetry(dir string) error {
	var err error
	for range 20 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// CPU precedence. On a small machine the node work (image unpacking,
// gVisor sandboxes starting, the kubelet's pod syncs) can take every core
// while a claim waits for the apiserver and etcd. The host processes are
// therefore split into two CPU cgroups beside the pods' cgroup root:
//
//	/agent-sandbox-control-plane  etcd, apiserver, controller-manager, scheduler, CoreDNS
//	/agent-sandbox-node           containerd (and its shims), kubelet, kube-proxy, kube-router, local-path
//	/agent-sandbox                the pods (the kubelet's cgroupRoot)
//
// Weights only matter under contention: an idle control plane costs the
// pods nothing. cpu.shares (v1) / cpu.weight (v2) are relative, so the
// control plane gets 4x the node agents and the pods when all are busy.
const (
	cpuGroupControlPlane = cgroupName + "-control-plane"
	cpuGroupNode         = cgroupName + "-node"
)

// cpuShares are cgroup v1 cpu.shares (default 1024); v2 cpu.weight is the
// same ratio on its 100 scale.
var cpuShares = map[string]int{
	cpuGroupControlPlane: 4096,
	cpuGroupNode:         1024,
}

// cpuCgroupMount returns the hierarchy holding the cpu controller: the v1
// "cpu" (often "cpu,cpuacct") mount, or the v2 unified root.
func cpuCgroupMount() (string, bool, error) {
	if isCgroupV2() {
		return "/sys/fs/cgroup", true, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		m, ok := parseMountinfo(line)
		if !ok || m.fstype != "cgroup" {
			continue
		}
		_, post, _ := strings.Cut(line, " - ")
		g := strings.Fields(post)
		if len(g) < 3 {
			continue
		}
		if slices.Contains(strings.Split(g[2], ","), "cpu") {
			return m.mountPoint, false, nil
		}
	}
	return "", false, errors.New("no cgroup hierarchy has the cpu controller")
}

// ensureCPUGroups creates the two groups with their weights.
func ensureCPUGroups() error {
	mnt, v2, err := cpuCgroupMount()
	if err != nil {
		return err
	}
	if v2 {
		// Child weights need the cpu controller enabled for the root's children.
		_ = os.WriteFile(filepath.Join(mnt, "cgroup.subtree_control"), []byte("+cpu"), 0o644)
	}
	for g, shares := range cpuShares {
		dir := filepath.Join(mnt, g)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		file, val := "cpu.shares", strconv.Itoa(shares)
		if v2 {
			file, val = "cpu.weight", strconv.Itoa(shares*100/1024)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0o644); err != nil {
			return fmt.Errorf("set %s/%s: %w", dir, file, err)
		}
	}
	return nil
}

// joinCPUGroup moves pid (all its threads) into group.
func joinCPUGroup(group string, pid int) error {
	mnt, _, err := cpuCgroupMount()
	if err != nil {
		return err
	}
	p := filepath.Join(mnt, group, "cgroup.procs")
	if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("join %s: %w", p, err)
	}
	return nil
}

// cpuGroupOf returns the cpu cgroup path of pid (for tests and status).
func cpuGroupOf(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && (f[0] == "0" && isCgroupV2() || slices.Contains(strings.Split(f[1], ","), "cpu")) {
			return f[2]
		}
	}
	return ""
}

// removeCPUGroups moves any process left in the groups back to the root
// (Down has stopped ours; a leftover would keep the directory busy) and
// removes them.
func removeCPUGroups() error {
	mnt, _, err := cpuCgroupMount()
	if err != nil {
		return nil //nolint:nilerr // no cpu controller mounted: the groups were never created
	}
	var errs []error
	for g := range cpuShares {
		dir := filepath.Join(mnt, g)
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		for _, pid := range strings.Fields(string(data)) {
			_ = os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(pid), 0o644)
		}
		if err := rmdirRetry(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

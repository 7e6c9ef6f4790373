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
				return nil
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

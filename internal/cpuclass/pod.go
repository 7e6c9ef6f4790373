package cpuclass

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// PodCgroups locates a Pod's cgroups in the cpu hierarchy as the kubelet's
// cgroupfs driver lays them out:
//
//	<Mount><Root>/kubepods[/burstable|/besteffort]/pod<UID>/<container ID>
type PodCgroups struct {
	Mount string // the cpu hierarchy, e.g. /sys/fs/cgroup/cpu
	Root  string // the kubelet's cgroupRoot, e.g. /agent-sandbox
}

// qosDirs are where the kubelet puts a Pod by QoS class (Guaranteed Pods
// sit directly under kubepods).
var qosDirs = []string{"kubepods/burstable", "kubepods/besteffort", "kubepods"}

// Chain returns the cgroup directories from the kubelet's root down to the
// container's, parents first. The Pod is found by its UID, which the
// apiserver assigned, so another Pod cannot be mistaken for it.
func (c PodCgroups) Chain(uid types.UID, containerID string) ([]string, error) {
	if uid == "" || strings.ContainsAny(string(uid), "/.") {
		return nil, fmt.Errorf("bad pod UID %q", uid)
	}
	if containerID == "" || strings.ContainsAny(containerID, "/.") {
		return nil, fmt.Errorf("bad container ID %q", containerID)
	}
	root := filepath.Join(c.Mount, c.Root)
	for _, q := range qosDirs {
		pod := filepath.Join(root, q, "pod"+string(uid))
		if _, err := os.Stat(pod); errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		ctr := filepath.Join(pod, containerID)
		if _, err := os.Stat(ctr); err != nil {
			return nil, fmt.Errorf("container %s of pod %s: %w", containerID, uid, err)
		}
		chain := []string{root}
		p := root
		for _, part := range strings.Split(q, "/") {
			p = filepath.Join(p, part)
			chain = append(chain, p)
		}
		return append(chain, pod, ctr), nil
	}
	return nil, fmt.Errorf("pod %s has no cgroup under %s: %w", uid, root, fs.ErrNotExist)
}

// ContainerID strips the runtime prefix the kubelet reports
// ("containerd://<id>").
func ContainerID(s string) string {
	if _, id, ok := strings.Cut(s, "://"); ok {
		return id
	}
	return s
}

// Grant gives a Pod's containers' threads the real-time class: b per
// container on each container's cgroup, their sum on the Pod's cgroup and
// every parent up to the kubelet's root (raised, never lowered, on the
// shared parents), then SCHED_RR on each thread in the containers'
// cgroups. It is idempotent; changed counts the threads moved this time.
func (c PodCgroups) Grant(uid types.UID, containerIDs []string, b Budget) (changed int, err error) {
	if len(containerIDs) == 0 {
		return 0, nil
	}
	var chains [][]string
	for _, id := range containerIDs {
		chain, err := c.Chain(uid, id)
		if err != nil {
			return 0, err
		}
		chains = append(chains, chain)
	}
	if err := c.resetStale(chains, b); err != nil {
		return 0, err
	}
	sum := Budget{Period: b.Period, Runtime: b.Runtime * time.Duration(len(containerIDs))}
	for _, dir := range chains[0][:len(chains[0])-1] {
		if err := RaiseBudget(dir, sum); err != nil {
			return 0, err
		}
	}
	for _, chain := range chains {
		ctr := chain[len(chain)-1]
		if err := RaiseBudget(ctr, b); err != nil {
			return changed, err
		}
		n, err := SetThreads(CgroupThreads(ctr), Policy{Realtime: true})
		changed += n
		if err != nil {
			return changed, fmt.Errorf("container %s: %w", filepath.Base(ctr), err)
		}
	}
	return changed, nil
}

// resetStale clears the budgets along a Pod's chain when any of them runs
// over another period than b's (granted by an agent with another --period,
// e.g. before an upgrade). The kernel checks each write on its own, and a
// group's period cannot move while its children hold budgets over the old
// one, so the chain is emptied from the containers up and Grant then sets
// it again from the top. The Pod's threads leave the real-time class
// first, since the kernel keeps a budget that real-time tasks use; Grant
// puts them back. A shared parent another Pod still holds over the old
// period fails the write, and the agent retries once that Pod has moved.
func (c PodCgroups) resetStale(chains [][]string, b Budget) error {
	dirs := append([]string(nil), chains[0][:len(chains[0])-1]...) // the kubelet's root down to the Pod
	for _, chain := range chains {
		dirs = append(dirs, chain[len(chain)-1])
	}
	found := false
	for _, dir := range dirs {
		s, err := stale(dir, b)
		if err != nil {
			return err
		}
		found = found || s
	}
	if !found {
		return nil
	}
	for _, chain := range chains {
		ctr := chain[len(chain)-1]
		if _, err := SetThreads(CgroupThreads(ctr), Policy{}); err != nil {
			return fmt.Errorf("container %s: leave the real-time class to change its period: %w", filepath.Base(ctr), err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := writeMicros(filepath.Join(dirs[i], fileRuntime), 0); err != nil {
			return fmt.Errorf("clear the real-time budget of %s to move it to a %v period (another group may still hold one over the old period): %w", dirs[i], b.Period, err)
		}
	}
	return nil
}

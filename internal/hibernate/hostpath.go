package hibernate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// The paths the agent learns from containerd (a container's OCI mount
// sources) are the node's. A host-process agent opens them as they are; an
// agent in a container (the chart's DaemonSet) sees only the node
// directories mounted into it, at other paths. HostPaths maps one to the
// other, and refuses a path outside every mount: there it would name a file
// of the agent's own container image, and root would write the tenant's
// snapshot into it (or read something that is not the volume) instead of
// failing.

// HostMount is a node directory mounted into the agent: Host is the node's
// path, Local where the agent sees it.
type HostMount struct {
	Host, Local string
}

// ParseHostMount parses HOST[:LOCAL] (LOCAL defaults to HOST: mounted at
// the same path). Both must be clean absolute paths; ':' cannot be in a
// path, as in docker's -v.
func ParseHostMount(s string) (HostMount, error) {
	host, local, found := strings.Cut(s, ":")
	if !found {
		local = host
	}
	for _, p := range []string{host, local} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.Contains(p, ":") {
			return HostMount{}, fmt.Errorf("volume root %q: want HOST[:LOCAL] with clean absolute paths", s)
		}
	}
	return HostMount{Host: host, Local: local}, nil
}

func (m HostMount) String() string { return m.Host + ":" + m.Local }

// HostPaths are the node directories mounted into the agent. Empty: the
// agent is a host process and every node path is its own.
type HostPaths []HostMount

// ErrNotMounted says a node path is outside every directory mounted into
// the agent.
var ErrNotMounted = errors.New("not under a node directory mounted into the agent")

// Local returns where the agent reaches the node path p: under the mount
// with the longest Host containing p. The match is by whole path
// components (/var/lib/kubelet/pods does not contain
// /var/lib/kubelet/pods2), and p must be clean and absolute, so no ".."
// walks out of the mount.
func (h HostPaths) Local(p string) (string, error) {
	local, _, err := h.local(p)
	return local, err
}

func (h HostPaths) local(p string) (string, HostMount, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", HostMount{}, fmt.Errorf("node path %q is not a clean absolute path", p)
	}
	if len(h) == 0 {
		return p, HostMount{Host: "/", Local: "/"}, nil
	}
	best, rel := -1, ""
	for i, m := range h {
		r, ok := within(m.Host, p)
		if ok && (best < 0 || len(m.Host) > len(h[best].Host)) {
			best, rel = i, r
		}
	}
	if best < 0 {
		return "", HostMount{}, fmt.Errorf("node path %s: %w (%v)", p, ErrNotMounted, []HostMount(h))
	}
	return filepath.Join(h[best].Local, rel), h[best], nil
}

// Reach is Local, then resolves symbolic links in the agent's own file
// system and requires the result to stay inside the same mount: an
// absolute link on the node (say /var/lib/kubelet -> /data/kubelet)
// resolves, in the container, against the container's root, which is not
// the node's. The returned path has no links, so a later open of it means
// the directory checked here.
func (h HostPaths) Reach(p string) (string, error) {
	local, m, err := h.local(p)
	if err != nil || len(h) == 0 {
		return local, err
	}
	resolved, err := filepath.EvalSymlinks(local)
	if err != nil {
		return "", fmt.Errorf("node path %s (%s here): %w", p, local, err)
	}
	// The mount point itself may be reached through links (e.g. /host ->
	// /mnt/host in some images); compare with its resolved form. Another
	// mount would not do either: the shim, on the node, follows the node's
	// path, which is not what that mount holds.
	root, err := filepath.EvalSymlinks(m.Local)
	if err != nil {
		return "", fmt.Errorf("mount of %s: %w", m.Host, err)
	}
	if _, ok := within(root, resolved); !ok {
		return "", fmt.Errorf("node path %s resolves to %s, outside %s: %w", p, resolved, m.Local, ErrNotMounted)
	}
	return resolved, nil
}

// within reports whether p is dir or below it, and the rest of p.
func within(dir, p string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

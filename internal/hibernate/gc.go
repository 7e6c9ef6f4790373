package hibernate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// SandboxUIDFunc returns the UID of the Sandbox namespace/name, or "" when
// there is none.
type SandboxUIDFunc func(ctx context.Context, namespace, name string) (string, error)

// Collect deletes the snapshots whose Sandbox is gone: deleted while
// suspended, or deleted and recreated under the same name (another UID).
// Without it such a snapshot would stay on the node for ever. A snapshot is
// kept when the lookup fails (never delete on doubt), and partial
// checkpoints older than staleAfter are removed (the agent was killed in
// the middle of one; a running checkpoint keeps writing to it).
func (s Store) Collect(ctx context.Context, sandboxUID SandboxUIDFunc, staleAfter time.Duration, now time.Time) (deleted []string, err error) {
	// A volume snapshot moved into a Pod's restore dir whose result was
	// never reported (agent down at the time) is the shim's leftover.
	if entries, err := os.ReadDir(filepath.Join(s.Root, "restoring")); err == nil {
		for _, e := range entries {
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > staleAfter {
				if err := os.RemoveAll(filepath.Join(s.Root, "restoring", e.Name())); err == nil {
					deleted = append(deleted, "restoring/"+e.Name())
				}
			}
		}
	}
	namespaces, err := os.ReadDir(filepath.Join(s.Root, "snapshots"))
	if err != nil {
		if os.IsNotExist(err) {
			return deleted, nil
		}
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	for _, nsDir := range namespaces {
		ns := nsDir.Name()
		entries, err := os.ReadDir(filepath.Join(s.Root, "snapshots", ns))
		if err != nil {
			continue
		}
		for _, e := range entries {
			id, partial := strings.CutSuffix(e.Name(), ".partial")
			dir, err := s.SnapshotDir(ns, id)
			if err != nil {
				continue // not ours to judge
			}
			if partial {
				if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > staleAfter {
					if err := os.RemoveAll(dir + ".partial"); err == nil {
						deleted = append(deleted, ns+"/"+e.Name())
					}
				}
				continue
			}
			m, err := s.ReadMeta(ns, id)
			if err != nil {
				continue // being published, or unreadable: the shim refuses it anyway
			}
			uid, err := sandboxUID(ctx, ns, m.SandboxName)
			if err != nil {
				klog.ErrorS(err, "looking up a snapshot's Sandbox; keeping the snapshot", "snapshot", ns+"/"+id)
				continue
			}
			if uid == m.SandboxUID {
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
				return deleted, fmt.Errorf("deleting snapshot %s/%s: %w", ns, id, err)
			}
			deleted = append(deleted, ns+"/"+id)
		}
	}
	return deleted, nil
}

package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Debootstrap describes a Debian root file system made by debootstrap.
type Debootstrap struct {
	Suite   string   // e.g. "bookworm"
	Variant string   // e.g. "minbase"
	Include []string // extra packages, e.g. "python3"
	Mirror  string   // e.g. "http://deb.debian.org/debian"
}

// Name is the cache directory name of the root file system.
func (d Debootstrap) Name() string {
	parts := []string{"debian", d.Suite}
	if d.Variant != "" {
		parts = append(parts, d.Variant)
	}
	parts = append(parts, d.Include...)
	return strings.Join(parts, "-")
}

// prunable lists what debootstrap leaves that has no place in an image:
// downloaded packages, package lists and logs (which also carry build
// times).
var prunable = []string{
	"var/cache/apt/archives/*.deb",
	"var/cache/apt/*.bin",
	"var/lib/apt/lists/*_*",
	"var/log/*.log",
	"var/log/apt/*",
	"var/cache/ldconfig/aux-cache",
}

// EnsureRootfs returns <cacheDir>/rootfs/<d.Name()>, building it first if
// it is not cached yet: debootstrap (installed on demand as root) into a
// temporary directory, prune it, then rename it into place and write a
// "<dir>.ok" marker, so an interrupted build is never mistaken for a
// complete one. Needs root and the Debian mirror.
func EnsureRootfs(ctx context.Context, cacheDir string, d Debootstrap, log io.Writer) (string, error) {
	dir := filepath.Join(cacheDir, "rootfs", d.Name())
	marker := dir + ".ok"
	if _, err := os.Stat(marker); err == nil {
		return dir, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("building %s needs root (debootstrap)", dir)
	}
	bin, err := ensureTool(ctx, "debootstrap", "debootstrap", log)
	if err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	for _, p := range []string{tmp, dir} {
		if err := os.RemoveAll(p); err != nil {
			return "", fmt.Errorf("remove stale %s: %w", p, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	args := []string{}
	if d.Variant != "" {
		args = append(args, "--variant="+d.Variant)
	}
	if len(d.Include) > 0 {
		args = append(args, "--include="+strings.Join(d.Include, ","))
	}
	args = append(args, d.Suite, tmp)
	if d.Mirror != "" {
		args = append(args, d.Mirror)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("debootstrap %s: %w", strings.Join(args, " "), err)
	}
	for _, pattern := range prunable {
		matches, err := filepath.Glob(filepath.Join(tmp, pattern))
		if err != nil {
			return "", err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return "", fmt.Errorf("prune %s: %w", m, err)
			}
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if err := os.WriteFile(marker, []byte(strings.Join(args, " ")+"\n"), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

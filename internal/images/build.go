package images

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// CacheDir returns ${AGENT_SANDBOX_CACHE:-$HOME/.cache/agent-sandbox}, where
// the project keeps built binaries, root file systems and image archives.
func CacheDir() (string, error) {
	if d := os.Getenv("AGENT_SANDBOX_CACHE"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locate cache directory: %w", err)
	}
	return filepath.Join(home, ".cache", "agent-sandbox"), nil
}

// GoBinary builds the main package pkg of the module in moduleDir as a
// static Linux binary at out. The build is reproducible: no cgo, trimmed
// paths, no VCS stamp, an empty build id and stripped symbols, so the same
// sources and toolchain give the same bytes and the image digest does not
// change between builds. ldflags are appended (e.g. "-X main.version=v1").
func GoBinary(ctx context.Context, moduleDir, pkg, out string, ldflags ...string) error {
	return GoBinaryArch(ctx, moduleDir, pkg, out, runtime.GOARCH, ldflags...)
}

// GoBinaryArch is GoBinary for another GOARCH (static binaries
// cross-compile, so multi-arch images of Go commands need no emulation).
func GoBinaryArch(ctx context.Context, moduleDir, pkg, out, goarch string, ldflags ...string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("create binary directory: %w", err)
	}
	flags := append([]string{"-s", "-w", "-buildid="}, ldflags...)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", strings.Join(flags, " "), "-o", out, pkg)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, stderr.String())
	}
	return nil
}

// ensureTool makes sure the program bin is on PATH, installing the Debian
// package pkg with apt-get when running as root.
func ensureTool(ctx context.Context, bin, pkg string, log io.Writer) (string, error) {
	if p, err := exec.LookPath(bin); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s not found; install the Debian package %s", bin, pkg)
	}
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-q", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		return cmd.Run()
	}
	if err := install(); err != nil {
		// A fresh machine may not have package lists yet.
		update := exec.CommandContext(ctx, "apt-get", "update", "-q")
		update.Stdout, update.Stderr = log, log
		if uerr := update.Run(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %w", uerr)
		}
		if err := install(); err != nil {
			return "", fmt.Errorf("apt-get install %s: %w", pkg, err)
		}
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", errors.New(bin + " still not found after installing " + pkg)
	}
	return p, nil
}

// Busybox returns the path of a static busybox binary, installing Debian's
// busybox-static when needed (as root).
func Busybox(ctx context.Context, log io.Writer) (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if isStaticBusybox(p) {
			return p, nil
		}
	}
	if _, err := ensureTool(ctx, "busybox", "busybox-static", log); err != nil {
		return "", err
	}
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if isStaticBusybox(p) {
			return p, nil
		}
	}
	return "", errors.New("no static busybox found; install busybox-static")
}

// isStaticBusybox reports whether p is an ELF executable without an
// interpreter (Debian's dynamically linked "busybox" package would need a
// libc the minimal image does not have).
func isStaticBusybox(p string) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

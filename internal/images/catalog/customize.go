package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// Customized is a Debian root file system made from a debootstrap base by
// running a shell script in a chroot (apt-get install, pip install, ...).
// The result is cached under <cache>/rootfs/<Name>-<key>, where key hashes
// the base, the script and the input files: unchanged inputs never run the
// script again, changed ones build a new directory and drop the old one.
type Customized struct {
	// Name prefixes the cache directory, e.g. "jupyterlab".
	Name string
	// Base is the debootstrap root file system the script starts from.
	Base images.Debootstrap
	// Script runs as root with /bin/sh -eu inside the chroot, with /proc
	// mounted and the host's resolv.conf for network access.
	Script string
	// Inputs are files written into the chroot before the script runs and
	// removed afterwards, keyed by absolute path (e.g. a pinned
	// requirements.txt under /tmp).
	Inputs map[string][]byte
}

// key identifies the inputs of c: the base, the script and the input files.
func (c Customized) key() string {
	h := sha256.New()
	fmt.Fprintf(h, "base %s\nscript %d\n%s\n", c.Base.Name(), len(c.Script), c.Script)
	paths := make([]string, 0, len(c.Inputs))
	for p := range c.Inputs {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(h, "input %s %d\n", p, len(c.Inputs[p]))
		h.Write(c.Inputs[p])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Dir is where c is cached.
func (c Customized) Dir(cacheDir string) string {
	return filepath.Join(cacheDir, "rootfs", c.Name+"-"+c.key())
}

// EnsureCustomized returns the cached root file system of c, building it
// first when needed: copy the base (built by debootstrap if missing) to a
// temporary directory, run the script in a chroot inside a private mount
// namespace (so /proc never leaks out of it, even on a crash), remove the
// inputs, rename into place and write the "<dir>.ok" marker. Older builds
// of the same Name are removed. Needs root, the Debian mirror and whatever
// the script downloads from.
func EnsureCustomized(ctx context.Context, cacheDir string, c Customized, log io.Writer) (string, error) {
	dir := c.Dir(cacheDir)
	marker := dir + ".ok"
	if _, err := os.Stat(marker); err == nil {
		return dir, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("building %s needs root (chroot)", dir)
	}
	base, err := images.EnsureRootfs(ctx, cacheDir, c.Base, log)
	if err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	for _, p := range []string{tmp, dir} {
		if err := os.RemoveAll(p); err != nil {
			return "", fmt.Errorf("remove stale %s: %w", p, err)
		}
	}
	if out, err := exec.CommandContext(ctx, "cp", "-a", base, tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copy %s: %w: %s", base, err, out)
	}
	fail := func(err error) (string, error) {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	resolv := filepath.Join(tmp, "etc", "resolv.conf")
	origResolv, resolvErr := os.ReadFile(resolv)
	if host, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		if err := replaceFile(resolv, host); err != nil {
			return fail(err)
		}
	}
	inputs := maps.Clone(c.Inputs)
	if inputs == nil {
		inputs = map[string][]byte{}
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive",
		"PIP_NO_CACHE_DIR=1", "PIP_DISABLE_PIP_VERSION_CHECK=1",
	}
	// Downloads during the build trust what the host trusts (a TLS
	// intercepting proxy's CA, say); the image keeps Debian's own list.
	if ca := hostCABundle(); ca != nil {
		inputs[buildCA] = ca
		env = append(env, "PIP_CERT="+buildCA, "SSL_CERT_FILE="+buildCA, "REQUESTS_CA_BUNDLE="+buildCA)
	}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for p, data := range inputs {
		if err := os.WriteFile(filepath.Join(tmp, p), data, 0o644); err != nil {
			return fail(fmt.Errorf("input %s: %w", p, err))
		}
	}
	// The script is passed as an argument: no file to clean up, and the
	// chroot's /bin/sh (dash) runs it.
	inner := `mount -t proc proc "$1/proc" && exec chroot "$1" /bin/sh -euc "$2"` //nolint:dupword // mount syntax: -t <type> <source>, both "proc"
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", inner, "sh", tmp, c.Script)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fail(fmt.Errorf("customize %s (run with -v for the script's output): %w", c.Name, err))
	}
	for p := range inputs {
		if err := os.Remove(filepath.Join(tmp, p)); err != nil && !os.IsNotExist(err) {
			return fail(err)
		}
	}
	if resolvErr == nil {
		if err := replaceFile(resolv, origResolv); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(marker, []byte(c.Base.Name()+"\n"+c.Script+"\n"), 0o644); err != nil {
		return "", err
	}
	removeOlder(cacheDir, c.Name, dir)
	return dir, nil
}

// buildCA is where the host's CA bundle sits in the chroot during a build.
const buildCA = "/tmp/agent-sandbox-build-ca.crt"

// hostCABundle is the host's CA bundle ($SSL_CERT_FILE, else Debian's), or
// nil.
func hostCABundle() []byte {
	for _, p := range []string{os.Getenv("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"} {
		if p == "" {
			continue
		}
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return b
		}
	}
	return nil
}

// replaceFile writes data to path, replacing a symlink rather than writing
// through it (the chroot's resolv.conf may point anywhere).
func replaceFile(path string, data []byte) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// removeOlder deletes earlier builds <name>-<key> other than keep; a
// failure only costs disk space.
func removeOlder(cacheDir, name, keep string) {
	matches, _ := filepath.Glob(filepath.Join(cacheDir, "rootfs", name+"-*"))
	for _, m := range matches {
		d := strings.TrimSuffix(m, ".ok")
		rest := strings.TrimPrefix(filepath.Base(d), name+"-")
		if d == keep || len(rest) != 12 || strings.Contains(rest, "-") {
			continue
		}
		_ = os.Remove(d + ".ok")
		_ = os.RemoveAll(d)
	}
}

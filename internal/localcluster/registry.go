package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// RegistryVersion is the CNCF distribution registry hack/registry/build.sh
// builds (pinned in hack/registry/go.mod).
const RegistryVersion = "v3.1.2"

// RegistryPort is where the optional OCI registry listens on NodeIP.
const RegistryPort = 5000

const compRegistry = "registry"

// RegistryAddr is host:port of the node's registry: what `make push
// REGISTRY=<addr>/<prefix> INSECURE=1` pushes to and what pods name in
// their images.
func (c Config) RegistryAddr() string {
	return net.JoinHostPort(c.NodeIP.String(), strconv.Itoa(RegistryPort))
}

func (c Config) registryBinary() string {
	return filepath.Join(c.CacheDir, "bin", "registry-"+RegistryVersion, "registry")
}
func (c Config) registryConfigPath() string { return filepath.Join(c.configDir(), "registry.yml") }
func (c Config) registryDataDir() string    { return filepath.Join(c.StateDir, "registry") }

// registryHostsDir is containerd's config_path for registry hosts: one
// <host:port>/hosts.toml per registry (the CRI plugin reads it on every
// pull, so no restart is needed when it changes).
func (c Config) registryHostsDir() string { return filepath.Join(c.configDir(), "certs.d") }
func (c Config) registryHostsPath() string {
	return filepath.Join(c.registryHostsDir(), c.RegistryAddr(), "hosts.toml")
}

// registryHosts tells containerd to reach the node's registry over plain
// HTTP: it only listens on NodeIP, an address on this machine's bridge, so
// nothing crosses a network that TLS would protect.
func (c *Cluster) registryHosts() string {
	u := strconv.Quote("http://" + c.cfg.RegistryAddr())
	return fmt.Sprintf("server = %s\n\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n", u, u)
}

// writeRegistryHosts writes the hosts.toml of the node's registry, so
// containerd can pull from it whenever StartRegistry runs it.
func (c *Cluster) writeRegistryHosts() error {
	return writeFileIfChanged(c.cfg.registryHostsPath(), []byte(c.registryHosts()), 0o644)
}

// registryConfig is distribution's configuration: filesystem storage under
// StateDir (kept across restarts, removed by `down --purge`), deletes on so
// tests can clean up, no auth.
func (c *Cluster) registryConfig() string {
	return fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, strconv.Quote(c.cfg.registryDataDir()), strconv.Quote(c.cfg.RegistryAddr()))
}

func (c *Cluster) registrySpec() procSpec {
	return procSpec{name: compRegistry, binary: c.cfg.registryBinary(),
		env:         []string{"PATH=" + basePath},
		configFiles: []string{c.cfg.registryConfigPath()},
		args:        []string{"serve", c.cfg.registryConfigPath()},
	}
}

// StartRegistry runs the OCI registry on RegistryAddr (the binary from
// hack/registry/build.sh) unless it already runs with the same definition,
// and waits until it answers /v2/. The cluster must be up: NodeIP lives on
// its bridge.
func (c *Cluster) StartRegistry(ctx context.Context) error {
	if _, err := os.Stat(c.cfg.registryBinary()); err != nil {
		return &Error{Cause: "the registry binary is missing", Fix: "run hack/registry/build.sh", Err: err}
	}
	if err := writeFileIfChanged(c.cfg.registryConfigPath(), []byte(c.registryConfig()), 0o644); err != nil {
		return err
	}
	if err := c.writeRegistryHosts(); err != nil {
		return err
	}
	if err := os.MkdirAll(c.cfg.registryDataDir(), 0o755); err != nil {
		return err
	}
	spec := c.registrySpec()
	rec, err := c.cfg.readRecord(compRegistry)
	if err != nil {
		return err
	}
	if rec.alive() && rec.Hash == spec.hash() {
		ended, err := waitReused(ctx, rec, func(r *running) error { return waitRegistry(ctx, c.cfg.RegistryAddr(), r) })
		if err != nil || !ended {
			return err
		}
		// It was stopping: start it again, once its port is free.
		if err := waitPortFree(c.cfg.RegistryAddr(), 10*time.Second); err != nil {
			return err
		}
	} else if rec.alive() {
		stopProcess(rec, 10*time.Second)
	}
	r, err := c.cfg.startDetached(spec)
	if err != nil {
		return err
	}
	if err := waitRegistry(ctx, c.cfg.RegistryAddr(), r); err != nil {
		stopProcess(r.rec, 5*time.Second)
		_ = os.Remove(c.cfg.pidFile(compRegistry))
		return fmt.Errorf("registry: %w\n%s", err, c.cfg.logTail(compRegistry, 20))
	}
	c.step("registry: serving on %s (pid %d)", c.cfg.RegistryAddr(), r.rec.PID)
	return nil
}

// StopRegistry stops the registry if it runs; its storage stays.
func (c *Cluster) StopRegistry() {
	rec, _ := c.cfg.readRecord(compRegistry)
	c.stopComponent(compRegistry, rec, 10*time.Second)
}

// waitRegistry polls GET /v2/ until it answers 200, the process exits, or
// ctx ends (at most a minute).
func waitRegistry(ctx context.Context, addr string, r *running) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	var exited <-chan struct{}
	if r != nil {
		exited = r.exited
	}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		last = err
		select {
		case <-exited:
			return exitedErr("exited before serving", r.err)
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Ctr runs ctr against the node's containerd in the k8s.io namespace (the
// CRI's), e.g. to list or remove images in tests.
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	if c.bins.Ctr == "" {
		bins, err := c.cfg.locateBinaries()
		if err != nil {
			return "", err
		}
		c.bins = bins
	}
	return c.ctr(ctx, args...)
}

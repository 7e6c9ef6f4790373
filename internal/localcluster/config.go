package localcluster

import (
	"context"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Versions of the components, as pinned by the build modules under hack/
// (hack/kube/go.mod, hack/containerd/go.mod, hack/gvisor/go.mod). A unit test
// keeps these constants and the go.mod files in step.
const (
	KubernetesVersion = "v1.37.2"
	ContainerdVersion = "v2.4.2"
	GVisorVersion     = "v0.0.0-20260905035102-160fafc42237"
	// The node add-ons (hack/coredns, hack/kuberouter, hack/localpath).
	CoreDNSVersion    = "v1.15.0"
	KubeRouterVersion = "v2.1.0"
	LocalPathVersion  = "v0.0.30"
)

// Image references the cluster relies on.
const (
	// PauseImage is the pod sandbox image, built from internal/localcluster/pause.
	PauseImage = "localhost/agent-sandbox/pause:v1"
	// LocalPathHelperImage runs local-path-provisioner's setup/teardown
	// scripts (mkdir/rm of a volume directory): busybox and nothing else.
	LocalPathHelperImage = "localhost/agent-sandbox/local-path-helper:v1"
)

// Config describes one local cluster. DefaultConfig fills every field; callers
// usually only add ManifestPaths, Images or PostUp hooks.
type Config struct {
	// CacheDir holds the binaries built by hack/deps.sh (bin/<version>/...)
	// and derived artefacts such as image tarballs. Kept across `down --purge`.
	CacheDir string
	// StateDir holds persistent cluster state: PKI, etcd data, containerd
	// root, kubelet root, configs, logs and the admin kubeconfig.
	StateDir string
	// RunDir holds volatile state: sockets, pid files, containerd state and
	// the runsc root. It lives on tmpfs so a reboot forgets stale pids.
	RunDir string

	// NodeName is the Kubernetes node name (independent of the hostname).
	NodeName string
	// NodeIP is the node's InternalIP. It sits (as a /32) on Bridge, which
	// this package creates, so the kubelet and apiserver never listen on the
	// machine's external interface, yet the address is not loopback (the
	// kubelet refuses a loopback node IP and pods cannot reach 127.0.0.1).
	// (A dummy interface would be tidier, but not every kernel has one.)
	NodeIP netip.Addr
	// Bridge is the pod bridge. It carries NodeIP and the pods' gateway (the
	// first address of PodCIDR).
	Bridge string
	// PodCIDR is the pod address range (host-local IPAM on Bridge).
	PodCIDR netip.Prefix
	// ServiceCIDR is the Service ClusterIP range; its first address is the
	// `kubernetes` Service, which is DNATed to the apiserver.
	ServiceCIDR netip.Prefix

	// Ports. The apiserver and kubelet listen on NodeIP; everything else on 127.0.0.1.
	APIServerPort         int
	EtcdClientPort        int
	EtcdPeerPort          int
	KubeletPort           int
	KubeletHealthzPort    int
	ControllerManagerPort int
	SchedulerPort         int
	// Add-on ports, all on 127.0.0.1 except DNS (NodeIP:53, where pods send
	// queries).
	CoreDNSHealthPort     int
	CoreDNSReadyPort      int
	KubeProxyHealthzPort  int
	KubeProxyMetricsPort  int
	KubeRouterMetricsPort int

	// EtcdUnsafeNoFsync trades crash durability for write latency (etcd
	// --unsafe-no-fsync). Useful for benchmarks on slow disks; a clean
	// `down` still persists everything.
	EtcdUnsafeNoFsync bool

	// APIServerGOGC is the apiserver's Go GC target (GOGC); 0 keeps Go's
	// default of 100. On a 2-core node each apiserver GC's concurrent mark
	// (live heap ~180 MB) takes 130-490 ms of contended CPU and stretches
	// the claim writes that overlap it; a higher target means fewer GCs.
	// See docs/performance.md, "The apiserver's GC (5 December)".
	APIServerGOGC int
	// APIServerMemoryLimit is the apiserver's soft Go memory limit
	// (GOMEMLIMIT) in bytes; 0 means none. It bounds what the higher GOGC
	// costs: near the limit the runtime collects as often as it must.
	APIServerMemoryLimit int64

	// GVisorPlatform is the gVisor platform of the node: auto (the
	// default: kvm when a real kvm smoke run passes, else systrap), kvm
	// or systrap. Empty means $AGENT_SANDBOX_GVISOR_PLATFORM, else auto.
	GVisorPlatform string
	// KVMDevice is the KVM device for the probe and runsc; empty means
	// $AGENT_SANDBOX_KVM_DEVICE, else /dev/kvm.
	KVMDevice string
	// KVMProbeTimeout bounds the kvm smoke run (0: 10 s).
	KVMProbeTimeout time.Duration
	// RealtimePods are NAMESPACE/SERVICEACCOUNT identities whose Pods the
	// node's cpu agent puts in the real-time class (cpuagent.go); nil
	// means the controller's (defaultRealtimePods).
	RealtimePods []string

	// Images are OCI or docker-save tarballs imported into containerd's
	// k8s.io namespace after the pause image (re-imported when they change).
	Images []string
	// ManifestPaths are YAML/JSON files or directories applied with
	// server-side apply once the node is Ready (CRDs first).
	ManifestPaths []string
	// PostUp hooks run last, in order, each as a progress step.
	PostUp []Hook
}

// Hook is an extra step run at the end of Up, e.g. installing the controller.
type Hook struct {
	// Name is shown as the progress step.
	Name string
	// Run does the work; cfg authenticates as cluster admin.
	Run func(ctx context.Context, c *Cluster, cfg *rest.Config) error
}

// Environment variables that override the default directories.
const (
	EnvCacheDir = "AGENT_SANDBOX_CACHE"
	EnvStateDir = "AGENT_SANDBOX_STATE"
	EnvRunDir   = "AGENT_SANDBOX_RUN"
)

// DefaultConfig returns the embedded default cluster configuration. The
// addresses all live in 10.213.0.0/16, chosen to be unlikely to collide with
// a LAN; Up refuses to start if a route on another interface overlaps them.
func DefaultConfig() Config {
	return Config{
		CacheDir:              defaultCacheDir(),
		StateDir:              envOr(EnvStateDir, "/var/lib/agent-sandbox"),
		RunDir:                envOr(EnvRunDir, "/run/agent-sandbox"),
		NodeName:              "agent-sandbox",
		NodeIP:                netip.MustParseAddr("10.213.0.1"),
		Bridge:                "agentsbx-br0",
		PodCIDR:               netip.MustParsePrefix("10.213.128.0/17"),
		ServiceCIDR:           netip.MustParsePrefix("10.213.64.0/20"),
		APIServerPort:         6443,
		EtcdClientPort:        2379,
		EtcdPeerPort:          2380,
		KubeletPort:           10250,
		KubeletHealthzPort:    10248,
		ControllerManagerPort: 10257,
		SchedulerPort:         10259,
		CoreDNSHealthPort:     10054,
		CoreDNSReadyPort:      10181,
		KubeProxyHealthzPort:  10256,
		KubeProxyMetricsPort:  10249,
		KubeRouterMetricsPort: 20241,
		APIServerGOGC:         400,
		APIServerMemoryLimit:  apiServerMemoryLimit(memTotalBytes()),
	}
}

// apiServerMemoryLimit sizes the apiserver's GOMEMLIMIT from the machine's
// memory: an eighth of it, at least 1 GiB (a local node's apiserver holds
// ~180 MB live, so GOGC alone sets its pace there) and at most 4 GiB (past
// that the node, not the apiserver, should get the memory). Unknown memory
// (0) gives the floor.
func apiServerMemoryLimit(memTotal int64) int64 {
	const gib = int64(1) << 30
	return min(max(memTotal/8, gib), 4*gib)
}

// memTotalBytes is MemTotal from /proc/meminfo, or 0 when unreadable.
func memTotalBytes() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	return parseMemTotal(string(data))
}

// parseMemTotal reads the "MemTotal:  N kB" line of /proc/meminfo.
func parseMemTotal(meminfo string) int64 {
	for line := range strings.Lines(meminfo) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// apiServerGoEnv is the Go runtime environment of the apiserver process.
func (c Config) apiServerGoEnv() []string {
	var env []string
	if c.APIServerGOGC > 0 {
		env = append(env, "GOGC="+strconv.Itoa(c.APIServerGOGC))
	}
	if c.APIServerMemoryLimit > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.FormatInt(c.APIServerMemoryLimit, 10))
	}
	return env
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// defaultCacheDir is $AGENT_SANDBOX_CACHE or ~/.cache/agent-sandbox. Under
// sudo, HOME is root's while hack/deps.sh may have run as the invoking user,
// so the invoking user's cache is used when root has none.
func defaultCacheDir() string {
	if v := os.Getenv(EnvCacheDir); v != "" {
		return v
	}
	home, _ := os.UserHomeDir()
	dir := filepath.Join(home, ".cache", "agent-sandbox")
	if _, err := os.Stat(filepath.Join(dir, "bin")); err == nil {
		return dir
	}
	if su := os.Getenv("SUDO_USER"); su != "" {
		if u, err := user.Lookup(su); err == nil {
			alt := filepath.Join(u.HomeDir, ".cache", "agent-sandbox")
			if _, err := os.Stat(filepath.Join(alt, "bin")); err == nil {
				return alt
			}
		}
	}
	return dir
}

// Paths derived from the config. Keeping them in one place lets Down find
// exactly what Up created.

// KubeconfigPath is the admin kubeconfig written by Up.
func (c Config) KubeconfigPath() string { return filepath.Join(c.StateDir, "kubeconfig") }

func (c Config) pkiDir() string           { return filepath.Join(c.StateDir, "pki") }
func (c Config) configDir() string        { return filepath.Join(c.StateDir, "config") }
func (c Config) logDir() string           { return filepath.Join(c.StateDir, "logs") }
func (c Config) etcdDataDir() string      { return filepath.Join(c.StateDir, "etcd") }
func (c Config) kubeletDir() string       { return filepath.Join(c.StateDir, "kubelet") }
func (c Config) podLogsDir() string       { return filepath.Join(c.StateDir, "pod-logs") }
func (c Config) cniConfDir() string       { return filepath.Join(c.StateDir, "cni", "net.d") }
func (c Config) cniIPAMDir() string       { return filepath.Join(c.StateDir, "cni", "ipam") }
func (c Config) containerdRoot() string   { return filepath.Join(c.StateDir, "containerd") }
func (c Config) pidDir() string           { return filepath.Join(c.RunDir, "pids") }
func (c Config) containerdState() string  { return filepath.Join(c.RunDir, "containerd") }
func (c Config) containerdSocket() string { return filepath.Join(c.RunDir, "containerd.sock") }
func (c Config) runscRoot() string        { return filepath.Join(c.RunDir, "runsc") }
func (c Config) runcRoot() string         { return filepath.Join(c.RunDir, "runc") }

// HibernateDir is the node-local deep-hibernation store (gVisor checkpoints
// and per-Pod restore results). It is under StateDir, so snapshots survive a
// reboot and `down --purge` deletes them.
func (c Config) HibernateDir() string { return filepath.Join(c.StateDir, "hibernate") }
func (c Config) sysctlRecord() string { return filepath.Join(c.RunDir, "sysctl-restore.json") }

// localPathDir holds the volumes local-path-provisioner creates; it is under
// StateDir, so `down --purge` deletes the data with the rest of the state.
func (c Config) localPathDir() string { return filepath.Join(c.StateDir, "local-path") }

// netnsDir is where containerd mounts pod network namespaces
// (netns_mounts_under_state_dir), so they never mix with /var/run/netns.
func (c Config) netnsDir() string {
	return filepath.Join(c.containerdState(), "io.containerd.grpc.v1.cri", "netns")
}

// cgroupName is the kubelet's cgroupRoot: every pod cgroup lives below it, so
// Down can remove all of them without touching anybody else's.
const cgroupName = "agent-sandbox"

// kubeBinDir etc. are where hack/deps.sh puts the binaries.
func (c Config) kubeBinDir() string { return filepath.Join(c.CacheDir, "bin", KubernetesVersion) }
func (c Config) containerdBinDir() string {
	return filepath.Join(c.CacheDir, "bin", "containerd-"+ContainerdVersion)
}
func (c Config) gvisorBinDir() string {
	return filepath.Join(c.CacheDir, "bin", "gvisor-"+GVisorVersion)
}
func (c Config) addonBinDir(name, version string) string {
	return filepath.Join(c.CacheDir, "bin", name+"-"+version)
}
func (c Config) pauseBinary() string   { return filepath.Join(c.CacheDir, "bin", "pause", "pause") }
func (c Config) imageCacheDir() string { return filepath.Join(c.CacheDir, "images") }

// serviceIP is the ClusterIP of the `kubernetes` Service: the first address
// of ServiceCIDR.
func (c Config) serviceIP() netip.Addr { return c.ServiceCIDR.Masked().Addr().Next() }

// dnsServiceIP is the ClusterIP of the kube-dns Service: the tenth address
// of ServiceCIDR, as in kubeadm clusters.
func (c Config) dnsServiceIP() netip.Addr {
	a := c.ServiceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

// podGateway is the bridge address: the first address of PodCIDR.
func (c Config) podGateway() netip.Addr { return c.PodCIDR.Masked().Addr().Next() }

package localcluster

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Component names, also used for pid files and logs, in start order.
const (
	compEtcd              = "etcd"
	compContainerd        = "containerd"
	compAPIServer         = "kube-apiserver"
	compControllerManager = "kube-controller-manager"
	compScheduler         = "kube-scheduler"
	compKubelet           = "kubelet"
)

// Components lists every component in start order; Down stops them in reverse.
var Components = []string{compEtcd, compContainerd, compAPIServer, compControllerManager, compScheduler, compKubelet,
	compCoreDNS, compKubeProxy, compKubeRouter, compLocalPath, compHibernateAgent, compCPUAgent}

const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (c *Cluster) spec(name string) procSpec {
	switch name {
	case compEtcd:
		return c.etcdSpec()
	case compContainerd:
		return c.containerdSpec()
	case compAPIServer:
		return c.apiServerSpec()
	case compControllerManager:
		return c.controllerManagerSpec()
	case compScheduler:
		return c.schedulerSpec()
	case compKubelet:
		return c.kubeletSpec()
	case compCoreDNS:
		return c.coreDNSSpec()
	case compKubeProxy:
		return c.kubeProxySpec()
	case compKubeRouter:
		return c.kubeRouterSpec()
	case compLocalPath:
		return c.localPathSpec()
	case compHibernateAgent:
		return c.hibernateAgentSpec()
	case compCPUAgent:
		return c.cpuAgentSpec()
	}
	panic("unknown component " + name)
}

// ports each component listens on, for the port-in-use preflight.
func (c Config) ports(name string) []string {
	lo := "127.0.0.1"
	node := c.NodeIP.String()
	hp := func(h string, p int) string { return h + ":" + strconv.Itoa(p) }
	switch name {
	case compEtcd:
		return []string{hp(lo, c.EtcdClientPort), hp(lo, c.EtcdPeerPort)}
	case compAPIServer:
		return []string{hp(node, c.APIServerPort)}
	case compControllerManager:
		return []string{hp(lo, c.ControllerManagerPort)}
	case compScheduler:
		return []string{hp(lo, c.SchedulerPort)}
	case compKubelet:
		return []string{hp(node, c.KubeletPort), hp(lo, c.KubeletHealthzPort)}
	case compCoreDNS:
		return []string{hp(node, 53), hp(lo, c.CoreDNSHealthPort), hp(lo, c.CoreDNSReadyPort)}
	case compKubeProxy:
		return []string{hp(lo, c.KubeProxyHealthzPort), hp(lo, c.KubeProxyMetricsPort)}
	case compKubeRouter:
		return []string{hp(lo, c.KubeRouterMetricsPort)}
	}
	return nil
}

func (c *Cluster) etcdSpec() procSpec {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.cfg.EtcdClientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.cfg.EtcdPeerPort)
	args := []string{
		"--name=agent-sandbox",
		"--data-dir=" + c.cfg.etcdDataDir(),
		// Plain HTTP on loopback only: nothing but the apiserver talks to it.
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=agent-sandbox=" + peer,
		"--log-level=warn",
		// Keep the database small on a dev machine; the apiserver compacts every 5 min.
		"--quota-backend-bytes=2147483648",
		"--snapshot-count=10000",
	}
	if c.cfg.EtcdUnsafeNoFsync {
		args = append(args, "--unsafe-no-fsync=true")
	}
	return procSpec{name: compEtcd, binary: c.bins.Etcd, args: args, env: []string{"PATH=" + basePath}, cpuGroup: cpuGroupControlPlane, realtime: c.realtime}
}

func (c *Cluster) apiServerSpec() procSpec {
	pki := c.cfg.pkiDir()
	p := func(f string) string { return filepath.Join(pki, f) }
	node := c.cfg.NodeIP.String()
	env := append([]string{"PATH=" + basePath}, c.cfg.apiServerGoEnv()...)
	return procSpec{name: compAPIServer, binary: c.bins.APIServer, env: env, cpuGroup: cpuGroupControlPlane, realtime: c.realtime,
		configFiles: []string{p("apiserver.crt"), p("ca.crt"), p("sa.pub"), p("apiserver-kubelet-client.crt")},
		args: []string{
			fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.cfg.EtcdClientPort),
			// NodeIP, not loopback: pods (the controller, the router) reach the
			// apiserver through the `kubernetes` Service, and Endpoints may not be
			// loopback addresses.
			"--bind-address=" + node,
			"--advertise-address=" + node,
			fmt.Sprintf("--secure-port=%d", c.cfg.APIServerPort),
			"--tls-cert-file=" + p("apiserver.crt"),
			"--tls-private-key-file=" + p("apiserver.key"),
			"--client-ca-file=" + p("ca.crt"),
			"--kubelet-client-certificate=" + p("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + p("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + p("ca.crt"),
			"--kubelet-preferred-address-types=InternalIP,Hostname",
			"--service-account-key-file=" + p("sa.pub"),
			"--service-account-signing-key-file=" + p("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-cluster-ip-range=" + c.cfg.ServiceCIDR.String(),
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true",
			// The CRDs' conversion webhook is a Service; with this flag the
			// apiserver (on the host, which routes the pod bridge) dials the
			// Service's endpoints directly instead of its ClusterIP, so
			// conversions work whether or not a Service proxy runs yet.
			"--enable-aggregator-routing=true",
			"--profiling=false",
			"--v=1",
		}}
}

func (c *Cluster) controllerManagerSpec() procSpec {
	kc := filepath.Join(c.cfg.pkiDir(), "controller-manager.conf")
	p := func(f string) string { return filepath.Join(c.cfg.pkiDir(), f) }
	return procSpec{name: compControllerManager, binary: c.bins.ControllerManager, env: []string{"PATH=" + basePath}, cpuGroup: cpuGroupControlPlane,
		configFiles: []string{kc, p("ca.crt"), p("sa.key")},
		args: []string{
			"--kubeconfig=" + kc,
			"--authentication-kubeconfig=" + kc,
			"--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", c.cfg.ControllerManagerPort),
			"--service-account-private-key-file=" + p("sa.key"),
			"--root-ca-file=" + p("ca.crt"),
			"--cluster-signing-cert-file=" + p("ca.crt"),
			"--cluster-signing-key-file=" + p("ca.key"),
			"--use-service-account-credentials=true",
			"--service-cluster-ip-range=" + c.cfg.ServiceCIDR.String(),
			"--allocate-node-cidrs=false",
			"--leader-elect=false",
			// Pod garbage collection and endpoint updates follow sandbox churn.
			"--kube-api-qps=100",
			"--kube-api-burst=200",
			"--profiling=false",
			"--v=1",
		}}
}

func (c *Cluster) schedulerConfigPath() string {
	return filepath.Join(c.cfg.configDir(), "kube-scheduler.yaml")
}

// schedulerConfig raises the client rate limit: at the default 50 QPS the
// scheduler's binding writes would cap warm-pool refill speed.
func (c *Cluster) schedulerConfig() string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
`, filepath.Join(c.cfg.pkiDir(), "scheduler.conf"))
}

func (c *Cluster) schedulerSpec() procSpec {
	kc := filepath.Join(c.cfg.pkiDir(), "scheduler.conf")
	return procSpec{name: compScheduler, binary: c.bins.Scheduler, env: []string{"PATH=" + basePath}, cpuGroup: cpuGroupControlPlane,
		configFiles: []string{kc, c.schedulerConfigPath()},
		args: []string{
			"--config=" + c.schedulerConfigPath(),
			"--authentication-kubeconfig=" + kc,
			"--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", c.cfg.SchedulerPort),
			"--profiling=false",
			"--v=1",
		}}
}

func (c *Cluster) containerdConfigPath() string {
	return filepath.Join(c.cfg.configDir(), "containerd.toml")
}
func (c *Cluster) runscConfigPath() string { return filepath.Join(c.cfg.configDir(), "runsc.toml") }

// containerdConfig is containerd 2.x's version 3 config. Notes:
//   - restrict_oom_score_adj: root here may lack CAP_SYS_RESOURCE, so never
//     try to lower a container's oom_score_adj below containerd's own.
//   - netns_mounts_under_state_dir: pod network namespaces live under RunDir,
//     not in the shared /var/run/netns.
//   - runtime_path: shims are found by absolute path, not through PATH.
//   - NRI, the opt service, tracing and unused snapshotters are disabled: they
//     would create sockets and directories outside our state dirs.
func (c *Cluster) containerdConfig() string {
	q := strconv.Quote
	return fmt.Sprintf(`version = 3
root = %s
state = %s
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
  "io.containerd.internal.v1.tracing",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
]

[grpc]
  address = %s

[ttrpc]
  address = %s

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %s
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = %s

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = %s
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %s
          Root = %s
          SystemdCgroup = false
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        runtime_path = %s
        # The deep-hibernation restore annotation reaches the shim through
        # the OCI spec (admission lets only the controller set it).
        pod_annotations = ["agents.x-k8s.io/restore-snapshot"]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = %s
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%s]
      conf_dir = %s
      max_conf_num = 1
      use_internal_loopback = true
`,
		q(c.cfg.containerdRoot()), q(c.cfg.containerdState()),
		q(c.cfg.containerdSocket()), q(c.cfg.containerdSocket()+".ttrpc"),
		q(PauseImage), q(c.cfg.registryHostsDir()),
		q(c.bins.ShimRunc), q(c.bins.Runc), q(c.cfg.runcRoot()),
		q(c.bins.ShimRunsc), q(c.runscConfigPath()),
		q(c.bins.CNIBinDir), q(c.cfg.cniConfDir()))
}

// runscConfig is read by the gVisor shim (ConfigPath above). The platform is
// the one Up chose (platform.go): kvm when it really runs here, else systrap,
// which works everywhere.
func (c *Cluster) runscConfig() string {
	return fmt.Sprintf(`binary_name = %s
root = %s

[runsc_config]
  platform = %s
%s  # Deep hibernation restores a checkpoint into a new Pod, whose spec
  # differs by design (pod UID in the cgroup parent and volume paths); gVisor
  # would refuse the restore under its default "enforce".
  restore-spec-validation = "warning"
`, strconv.Quote(c.bins.Runsc), strconv.Quote(c.cfg.runscRoot()), strconv.Quote(c.runscPlatform()), c.runscPlatformOptions())
}

func (c *Cluster) containerdSpec() procSpec {
	return procSpec{name: compContainerd, binary: c.bins.Containerd, cpuGroup: cpuGroupNode,
		// The shims re-exec runc/runsc and mount helpers through PATH.
		env: []string{"PATH=" + strings.Join([]string{filepath.Dir(c.bins.Containerd), filepath.Dir(c.bins.Runsc), basePath}, ":"),
			// Read by the hibernation shim (shims inherit containerd's env).
			"AGENT_SANDBOX_HIBERNATE_DIR=" + c.cfg.HibernateDir()},
		configFiles: []string{c.containerdConfigPath(), c.runscConfigPath()},
		args:        []string{"--config=" + c.containerdConfigPath(), "--log-level=warn"},
	}
}

func (c *Cluster) kubeletConfigPath() string {
	return filepath.Join(c.cfg.configDir(), "kubelet.yaml")
}

// kubeletConfig is the KubeletConfiguration. Notes:
//   - failCgroupV1: false and cgroupDriver: cgroupfs make it run on cgroup v1
//     hosts without systemd; cgroupRoot keeps every pod cgroup under ours.
//   - clusterDNS points at the node IP, on the cluster's bridge, where
//     CoreDNS (a host process, see addons.go) serves cluster.local.
//   - Image GC is off: images cannot be pulled again (there is no registry).
//   - makeIPTablesUtilChains: false: the kubelet adds no iptables chains.
//   - podLogsDir keeps container logs under StateDir (the kubelet still
//     links them from /var/log/containers; Down removes those links).
//   - Client rate limits are raised so pod status writes keep up with
//     warm-pool refills.
//   - imagePullCredentialsVerificationPolicy: NeverVerify. Under the default
//     (NeverVerifyPreloadedImages) an image ID the kubelet once pulled under
//     one name is no longer "preloaded" under any other name: after a pull
//     of registry/agent-sandbox/python-runtime, the imported
//     localhost/agent-sandbox/python-runtime:dev (same ID) had to be pulled
//     again for credential verification, which cannot work for a local
//     import, and every pod using it stayed in ErrImagePull until the
//     kubelet's pull records were wiped. The node is single-user and its
//     images are local imports or anonymous pulls, so there are no pull
//     credentials to protect across namespaces.
func (c *Cluster) kubeletConfig() string {
	pki := c.cfg.pkiDir()
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [%s]
resolvConf: ""
makeIPTablesUtilChains: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%%", imagefs.available: "2%%"}
maxPods: 250
kubeAPIQPS: 100
kubeAPIBurst: 200
registerNode: true
rotateCertificates: false
imagePullCredentialsVerificationPolicy: NeverVerify
podLogsDir: %s
`, filepath.Join(pki, "ca.crt"), c.cfg.NodeIP, c.cfg.KubeletPort, c.cfg.KubeletHealthzPort,
		filepath.Join(pki, "kubelet-serving.crt"), filepath.Join(pki, "kubelet-serving.key"),
		c.cfg.containerdSocket(), cgroupName, c.cfg.NodeIP, c.cfg.podLogsDir())
}

func (c *Cluster) kubeletSpec() procSpec {
	kc := filepath.Join(c.cfg.pkiDir(), "kubelet.conf")
	return procSpec{name: compKubelet, binary: c.bins.Kubelet, env: []string{"PATH=" + basePath}, cpuGroup: cpuGroupNode,
		configFiles: []string{kc, c.kubeletConfigPath(), filepath.Join(c.cfg.pkiDir(), "kubelet-serving.crt")},
		args: []string{
			"--config=" + c.kubeletConfigPath(),
			"--kubeconfig=" + kc,
			"--root-dir=" + c.cfg.kubeletDir(),
			"--node-ip=" + c.cfg.NodeIP.String(),
			"--hostname-override=" + c.cfg.NodeName,
			"--v=1",
		}}
}

// writeConfigs renders every config file; unchanged files are left alone.
func (c *Cluster) writeConfigs() error {
	for path, content := range map[string]string{
		c.schedulerConfigPath():  c.schedulerConfig(),
		c.containerdConfigPath(): c.containerdConfig(),
		c.runscConfigPath():      c.runscConfig(),
		c.kubeletConfigPath():    c.kubeletConfig(),
	} {
		if err := writeFileIfChanged(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for path, content := range c.addonConfigs() {
		if err := writeFileIfChanged(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return c.writeRegistryHosts() // registry.go
}

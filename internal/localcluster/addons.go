package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// The node add-ons that make the single node a complete Kubernetes node.
// Each runs as a host process supervised like the core components (pid
// file, health check, restarted by the next Up when dead, stopped by Down):
//
//   - CoreDNS serves cluster.local from the apiserver on NodeIP:53 (on the
//     cluster's bridge, where the kubelet's clusterDNS points). A selectorless
//     kube-dns Service in kube-system leads to the same address.
//   - kube-proxy (iptables mode) routes ClusterIP Services; its NodePorts
//     only open on NodeIP.
//   - kube-router, firewall only, enforces NetworkPolicies with iptables and
//     ipset for the pods on the node.
//   - local-path-provisioner backs the default StorageClass `local-path`
//     with directories under StateDir/local-path; its helper pods run a
//     busybox-only image built here.
//
// Each add-on authenticates with its own client certificate and gets only
// the RBAC it needs (kube-proxy uses the built-in system:node-proxier).

const (
	compCoreDNS    = "coredns"
	compKubeProxy  = "kube-proxy"
	compKubeRouter = "kube-router"
	compLocalPath  = "local-path-provisioner"
)

const (
	localPathNamespace      = "local-path-storage"
	localPathServiceAccount = "local-path-provisioner-service-account"
	localPathConfigMap      = "local-path-config"
	// LocalPathStorageClass is the default StorageClass.
	LocalPathStorageClass = "local-path"
	localPathProvisioner  = "rancher.io/local-path"
)

func (c *Cluster) corefilePath() string { return filepath.Join(c.cfg.configDir(), "Corefile") }

// corefile serves only the cluster zones: pods never reach resolvers beyond
// this machine, so other names get REFUSED at once instead of timing out.
func (c *Cluster) corefile() string {
	return fmt.Sprintf(`cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s agent-sandbox
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
    loadbalance
}
`, c.cfg.NodeIP, c.cfg.CoreDNSHealthPort, c.cfg.CoreDNSReadyPort, filepath.Join(c.cfg.pkiDir(), "coredns.conf"))
}

func (c *Cluster) coreDNSSpec() procSpec {
	return procSpec{name: compCoreDNS, binary: c.bins.CoreDNS, env: []string{"PATH=" + basePath},
		configFiles: []string{c.corefilePath(), filepath.Join(c.cfg.pkiDir(), "coredns.conf")},
		args:        []string{"-conf", c.corefilePath()}, cpuGroup: cpuGroupControlPlane}
}

func (c *Cluster) kubeProxyConfigPath() string {
	return filepath.Join(c.cfg.configDir(), "kube-proxy.yaml")
}

// kubeProxyConfig: iptables mode. Notes:
//   - bindAddress NodeIP tells kube-proxy its node IP without waiting for the
//     Node object, so it starts in parallel with the kubelet.
//   - nodePortAddresses keeps NodePorts on the bridge address, never on the
//     machine's external interface; localhostNodePorts off keeps
//     route_localnet untouched.
//   - conntrack values 0 leave the host's conntrack sysctls alone.
func (c *Cluster) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
  qps: 50
  burst: 100
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
mode: iptables
clusterCIDR: %s
nodePortAddresses: ["%s/32"]
iptables:
  localhostNodePorts: false
  masqueradeAll: false
  syncPeriod: 30s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, filepath.Join(c.cfg.pkiDir(), "kube-proxy.conf"), c.cfg.NodeName, c.cfg.NodeIP,
		c.cfg.KubeProxyHealthzPort, c.cfg.KubeProxyMetricsPort, c.cfg.PodCIDR, c.cfg.NodeIP)
}

func (c *Cluster) kubeProxySpec() procSpec {
	return procSpec{name: compKubeProxy, binary: c.bins.KubeProxy, env: []string{"PATH=" + basePath},
		configFiles: []string{c.kubeProxyConfigPath(), filepath.Join(c.cfg.pkiDir(), "kube-proxy.conf")},
		args:        []string{"--config=" + c.kubeProxyConfigPath(), "--v=1"}, cpuGroup: cpuGroupNode}
}

// kubeRouterArgs run only the NetworkPolicy firewall: no BGP routing, no
// service proxy (kube-proxy does that), no CNI config. Its health port would
// listen on every interface, so it is off; metrics on loopback stand in.
func (c *Cluster) kubeRouterArgs() []string {
	return []string{
		"--kubeconfig=" + filepath.Join(c.cfg.pkiDir(), "kube-router.conf"),
		"--hostname-override=" + c.cfg.NodeName,
		"--run-firewall=true",
		"--run-router=false",
		"--run-service-proxy=false",
		"--run-loadbalancer=false",
		"--enable-cni=false",
		"--enable-ipv4=true",
		"--enable-ipv6=false",
		"--service-cluster-ip-range=" + c.cfg.ServiceCIDR.String(),
		"--health-port=0",
		"--metrics-addr=127.0.0.1",
		fmt.Sprintf("--metrics-port=%d", c.cfg.KubeRouterMetricsPort),
		"--iptables-sync-period=1m",
		"--v=1",
	}
}

func (c *Cluster) kubeRouterSpec() procSpec {
	return procSpec{name: compKubeRouter, binary: c.bins.KubeRouter, env: []string{"PATH=" + basePath},
		configFiles: []string{filepath.Join(c.cfg.pkiDir(), "kube-router.conf")},
		args:        c.kubeRouterArgs(), cpuGroup: cpuGroupNode}
}

func (c *Cluster) localPathConfigPath() string {
	return filepath.Join(c.cfg.configDir(), "local-path-config.json")
}
func (c *Cluster) localPathHelperPodPath() string {
	return filepath.Join(c.cfg.configDir(), "local-path-helper-pod.yaml")
}

func (c *Cluster) localPathConfig() string {
	data, _ := json.MarshalIndent(map[string]any{
		"nodePathMap": []map[string]any{{
			"node":  "DEFAULT_PATH_FOR_NON_LISTED_NODES",
			"paths": []string{c.cfg.localPathDir()},
		}},
	}, "", "  ")
	return string(data) + "\n"
}

// localPathHelperPod is the template of the setup/teardown pods: the local
// busybox image (never pulled), no service-account token.
func localPathHelperPod() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: helper-pod
    image: %s
    imagePullPolicy: Never
`, LocalPathHelperImage)
}

// The helper pod runs these with VOL_DIR, VOL_MODE and VOL_SIZE_BYTES set.
const (
	localPathSetup    = "#!/bin/sh\nset -eu\nmkdir -m 0777 -p \"$VOL_DIR\"\n"
	localPathTeardown = "#!/bin/sh\nset -eu\nrm -rf \"$VOL_DIR\"\n"
)

func (c *Cluster) localPathSpec() procSpec {
	return procSpec{name: compLocalPath, binary: c.bins.LocalPath, env: []string{"PATH=" + basePath},
		configFiles: []string{c.localPathConfigPath(), c.localPathHelperPodPath(), filepath.Join(c.cfg.pkiDir(), "local-path.conf")},
		args: []string{
			"start",
			"--kubeconfig=" + filepath.Join(c.cfg.pkiDir(), "local-path.conf"),
			"--namespace=" + localPathNamespace,
			"--provisioner-name=" + localPathProvisioner,
			"--helper-image=" + LocalPathHelperImage,
			"--configmap-name=" + localPathConfigMap,
			"--service-account-name=" + localPathServiceAccount,
			"--config=" + c.localPathConfigPath(),
			"--helper-pod-file=" + c.localPathHelperPodPath(),
			"--worker-threads=4",
		}, cpuGroup: cpuGroupNode}
}

// addonConfigs are the add-ons' config files, written by writeConfigs.
func (c *Cluster) addonConfigs() map[string]string {
	return map[string]string{
		c.corefilePath():           c.corefile(),
		c.kubeProxyConfigPath():    c.kubeProxyConfig(),
		c.localPathConfigPath():    c.localPathConfig(),
		c.localPathHelperPodPath(): localPathHelperPod(),
	}
}

// indent prefixes every line of s with n spaces (for YAML block scalars).
func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad) + "\n"
}

// addonManifests are applied as soon as the apiserver is up, before the
// add-ons start, so none of them starts without its permissions.
func (c *Cluster) addonManifests() string {
	dnsIP := c.cfg.dnsServiceIP()
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: agent-sandbox:coredns
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: agent-sandbox:coredns
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sandbox:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:agent-sandbox:coredns"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: agent-sandbox:kube-router
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: agent-sandbox:kube-router
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sandbox:kube-router"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:agent-sandbox:kube-router"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: agent-sandbox:local-path-provisioner
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
rules:
- apiGroups: [""]
  resources: [nodes, persistentvolumeclaims]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [update, patch]
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, update, patch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: agent-sandbox:local-path-provisioner
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agent-sandbox:local-path-provisioner"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:agent-sandbox:local-path-provisioner"}
---
# Helper pods and the script ConfigMap live in its own namespace only.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: local-path-provisioner
  namespace: %[1]s
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: local-path-provisioner
  namespace: %[1]s
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-path-provisioner}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:agent-sandbox:local-path-provisioner"}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: %[2]s
  namespace: %[1]s
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
automountServiceAccountToken: false
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: %[3]s
  namespace: %[1]s
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
data:
  setup: |
%[4]s  teardown: |
%[5]s---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %[6]s
  labels: {app.kubernetes.io/managed-by: agent-sandbox}
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: %[7]s
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
# CoreDNS is a host process on NodeIP:53; this Service (no selector, one
# EndpointSlice naming NodeIP) lets in-cluster clients find it the usual way.
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS, app.kubernetes.io/managed-by: agent-sandbox}
spec:
  clusterIP: %[8]s
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: agent-sandbox.x-k8s.io
    app.kubernetes.io/managed-by: agent-sandbox
addressType: IPv4
endpoints:
- addresses: ["%[9]s"]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
---
`+hibernateAgentRBAC+"---\n"+cpuAgentRBAC, localPathNamespace, localPathServiceAccount, localPathConfigMap,
		indent(localPathSetup, 4), indent(localPathTeardown, 4),
		LocalPathStorageClass, localPathProvisioner, dnsIP, c.cfg.NodeIP)
}

// localPathHelperTarball builds (once per busybox binary) the helper image:
// static busybox as /bin/busybox with the applets the scripts use.
func (c *Cluster) localPathHelperTarball() (string, error) {
	sum, err := FileSHA256(c.bins.Busybox)
	if err != nil {
		return "", fmt.Errorf("hash busybox: %w", err)
	}
	out := filepath.Join(c.cfg.imageCacheDir(), "local-path-helper-"+sum[:12]+".oci.tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	var links []images.Symlink
	for _, a := range []string{"sh", "mkdir", "rm", "chmod", "ls"} {
		links = append(links, images.Symlink{Path: "/bin/" + a, Target: "busybox"})
	}
	_, err = images.WriteTarball(images.Spec{
		Ref:      LocalPathHelperImage,
		Files:    []images.File{{Path: "/bin/busybox", Mode: 0o755, Source: c.bins.Busybox}},
		Symlinks: links,
		Env:      []string{"PATH=/bin"},
	}, out)
	return out, err
}

// waitNodeObject waits until the kubelet has registered the Node: kube-router
// reads its addresses at start and exits without it.
func (c *Cluster) waitNodeObject(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return userError(err, "see "+c.cfg.logFile(compKubelet), "node %s was not registered", c.cfg.NodeName)
	}
	return nil
}

// kubeRouterReady checks that kube-router serves metrics and has installed
// its top-level firewall chains (so policies are enforced from here on).
func (c *Cluster) kubeRouterReady(ctx context.Context) error {
	if err := c.httpCheck(nil, fmt.Sprintf("http://127.0.0.1:%d/metrics", c.cfg.KubeRouterMetricsPort), "")(ctx); err != nil {
		return err
	}
	for _, ch := range []string{"KUBE-ROUTER-FORWARD", "KUBE-ROUTER-INPUT", "KUBE-ROUTER-OUTPUT"} {
		if _, err := run(c.bins.Iptables, "-w", "-t", "filter", "-S", ch, "1"); err != nil {
			return fmt.Errorf("kube-router has not installed %s yet: %w", ch, err)
		}
	}
	return nil
}

// cleanupAddonNetwork removes what kube-proxy and kube-router installed:
// first through their own cleanup modes, then by sweeping every KUBE-*
// chain and ipset that is left (nothing else on a host running this
// cluster uses that prefix; the cluster refuses to share a node).
func (c *Cluster) cleanupAddonNetwork(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if c.bins.KubeProxy != "" && isExecutable(c.bins.KubeProxy) {
		_, _ = runCtx(ctx, c.bins.KubeProxy, "--cleanup", "--proxy-mode=iptables", "--v=0")
	}
	var errs []error
	for _, ipt := range []string{"iptables", "ip6tables"} {
		bin, err := lookPath(ipt)
		if err != nil {
			continue
		}
		if err := sweepKubeChains(bin); err != nil {
			errs = append(errs, err)
		}
	}
	if ipset, err := lookPath("ipset"); err == nil {
		if err := sweepKubeIPSets(ipset); err != nil {
			errs = append(errs, err)
		}
	}
	return joinErrs(errs)
}

func joinErrs(errs []error) error { return errors.Join(errs...) }

// runCtx is run with a context (cleanup commands must not hang Down).
func runCtx(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// addonChainPrefixes are the chain name prefixes of kube-proxy and
// kube-router (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*, KUBE-SVC-*, ...).
const addonChainPrefix = "KUBE-"

// prefixedChains parses iptables-save output into table -> chains whose
// name starts with prefix, and the rules (as -A specs) that jump to them
// from chains without the prefix.
func prefixedChains(save, prefix string) (chains map[string][]string, jumps map[string][]string) {
	chains, jumps = map[string][]string{}, map[string][]string{}
	table := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
		case strings.HasPrefix(line, ":"+prefix):
			chains[table] = append(chains[table], strings.Fields(strings.TrimPrefix(line, ":"))[0])
		case strings.HasPrefix(line, "-A "):
			f := strings.Fields(line)
			if len(f) > 1 && !strings.HasPrefix(f[1], prefix) && strings.Contains(line, " -j "+prefix) {
				jumps[table] = append(jumps[table], line)
			}
		}
	}
	return chains, jumps
}

func kubeChains(save string) (chains map[string][]string, jumps map[string][]string) {
	return prefixedChains(save, addonChainPrefix)
}

// sweepKubeChains deletes the hooks into KUBE-* chains, then the chains.
func sweepKubeChains(iptables string) error {
	return sweepChains(iptables, addonChainPrefix, nil)
}

// sweepChains deletes every chain named prefix* (except those keep
// accepts) in every table, with the rules jumping to it.
func sweepChains(iptables, prefix string, keep func(table, chain string) bool) error {
	save, err := run(iptables + "-save")
	if err != nil {
		return nil //nolint:nilerr // no such table support (e.g. ip6tables without IPv6): nothing installed either
	}
	chains, jumps := prefixedChains(save, prefix)
	kept := func(table, chain string) bool { return keep != nil && keep(table, chain) }
	var errs []error
	for table, rules := range jumps {
		for _, r := range rules {
			// Comments contain spaces; iptables-save quotes them.
			spec := splitQuoted(strings.TrimPrefix(r, "-A "))
			if target := jumpTarget(spec); kept(table, target) {
				continue
			}
			if _, err := run(iptables, append([]string{"-w", "-t", table, "-D"}, spec...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for table, names := range chains {
		for _, n := range names {
			if !kept(table, n) {
				_, _ = run(iptables, "-w", "-t", table, "-F", n)
			}
		}
		for _, n := range names {
			if kept(table, n) {
				continue
			}
			if _, err := run(iptables, "-w", "-t", table, "-X", n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func jumpTarget(spec []string) string {
	for i := 0; i+1 < len(spec); i++ {
		if spec[i] == "-j" {
			return spec[i+1]
		}
	}
	return ""
}

// splitQuoted splits an iptables-save rule into arguments, keeping
// "double quoted" strings (comments) as one argument without the quotes.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	inQ, have := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\' && inQ && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case ch == '"':
			inQ, have = !inQ, true
		case ch == ' ' && !inQ:
			if have || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
		}
	}
	if have || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// kubeRouterIPSet reports whether an ipset name is one kube-router makes.
func kubeRouterIPSet(name string) bool {
	name = strings.TrimPrefix(name, "inet6:")
	return strings.HasPrefix(name, addonChainPrefix) || strings.HasPrefix(name, "kube-router")
}

// sweepKubeIPSets destroys kube-router's ipsets (after the rules naming
// them are gone, or the kernel refuses).
func sweepKubeIPSets(ipset string) error {
	out, err := run(ipset, "list", "-n")
	if err != nil {
		return fmt.Errorf("list ipsets: %w", err)
	}
	var errs []error
	for _, n := range strings.Fields(out) {
		if !kubeRouterIPSet(n) {
			continue
		}
		if _, err := run(ipset, "destroy", n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

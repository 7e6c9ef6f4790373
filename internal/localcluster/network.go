package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The node network, all of it made (and removed) by this package:
//
//   - Bridge, holding NodeIP/32 (where the apiserver and kubelet listen) and
//     the pods' gateway address. The CNI bridge plugin runs with
//     isGateway=false and ipMasq=false, so it neither enables ip_forward nor
//     installs NAT rules: pods reach the host and each other, and nothing
//     else. A route sends ServiceCIDR to the bridge too, so traffic to an
//     unknown ClusterIP stays on it instead of leaving by the default route.
//   - iptables chains named AGENTSBX-*: DNAT of the `kubernetes` Service to
//     the apiserver (so in-cluster clients work even before kube-proxy has
//     synced), a FORWARD guard (mangle) that keeps pod traffic on the
//     bridge although forwarding is on for ClusterIP routing, and an INPUT
//     guard (mangle) so NodeIP and the pod gateway only accept traffic from
//     the host itself and from pods.

const chainPrefix = "AGENTSBX-"

type chain struct {
	table  string
	name   string
	hooks  []string // built-in chains that jump to it
	append bool     // hook at the end of the built-in chain instead of the start
	rules  [][]string
}

func (c Config) chains() []chain {
	svc := c.serviceIP().String() + "/32"
	api := fmt.Sprintf("%s:%d", c.NodeIP, c.APIServerPort)
	return []chain{
		{table: "nat", name: chainPrefix + "SERVICES", hooks: []string{"PREROUTING", "OUTPUT"},
			rules: [][]string{{"-d", svc, "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", api}}},
		// The guards live in the mangle table, which the kernel walks before
		// filter: kube-router ACCEPTs policy-compliant traffic in filter
		// FORWARD (and keeps its chain first there), so a guard in filter
		// could be bypassed. Mangle sees every forwarded packet first and
		// drops anything entering or leaving the bridge to another
		// interface: pods never reach beyond this machine, whatever a
		// NetworkPolicy allows.
		{table: "mangle", name: chainPrefix + "FORWARD", hooks: []string{"FORWARD"},
			rules: [][]string{
				{"-i", c.Bridge, "-o", c.Bridge, "-j", "RETURN"},
				{"-i", c.Bridge, "-j", "DROP"},
				{"-o", c.Bridge, "-j", "DROP"},
			}},
		// Bridge-to-bridge traffic is left to kube-router's policy chains and
		// kube-proxy's rules in filter FORWARD; this, appended last, accepts
		// what they let through even where the FORWARD policy is DROP.
		{table: "filter", name: chainPrefix + "FORWARD-ACCEPT", hooks: []string{"FORWARD"}, append: true,
			rules: [][]string{
				{"-i", c.Bridge, "-o", c.Bridge, "-j", "ACCEPT"},
			}},
		// NodeIP and the pod gateway only accept traffic from the host itself
		// and from the bridge (mangle again, before any ACCEPT in filter).
		{table: "mangle", name: chainPrefix + "INPUT", hooks: []string{"INPUT"},
			rules: [][]string{
				{"-i", "lo", "-j", "RETURN"},
				{"-i", c.Bridge, "-j", "RETURN"},
				{"-d", c.NodeIP.String() + "/32", "-j", "DROP"},
				{"-d", c.PodCIDR.String(), "-j", "DROP"},
			}},
	}
}

// wantedChain reports whether (table, name) is one of chains().
func (c Config) wantedChain(table, name string) bool {
	for _, ch := range c.chains() {
		if ch.table == table && ch.name == name {
			return true
		}
	}
	return false
}

// run executes a command and folds its output into the error.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// checkAddressSpace refuses to proceed when another interface already uses
// our address ranges: routing pods or the node IP over somebody's LAN would
// send traffic to non-local addresses.
func (c Config) checkAddressSpace() error {
	ours := map[string]bool{c.Bridge: true}
	ranges := []netip.Prefix{netip.PrefixFrom(c.NodeIP, 32), c.PodCIDR, c.ServiceCIDR}
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifaces {
		if ours[ifc.Name] || strings.HasPrefix(ifc.Name, "veth") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			for _, r := range ranges {
				if r.Overlaps(p) {
					return userError(nil, "choose other ranges (Config.NodeIP/PodCIDR/ServiceCIDR) or remove that address",
						"interface %s already has address %s, which overlaps the cluster's range %s", ifc.Name, p, r)
				}
			}
		}
	}
	return nil
}

// ensureNetwork creates the interfaces, routes, iptables chains and CNI
// config. Every step is idempotent.
func (c *Cluster) ensureNetwork() error {
	b := c.bins
	if err := c.cfg.checkAddressSpace(); err != nil {
		return err
	}
	if err := ensureLink(b.IP, c.cfg.Bridge, "bridge"); err != nil {
		return err
	}
	gw := netip.PrefixFrom(c.cfg.podGateway(), c.cfg.PodCIDR.Bits())
	for _, cmd := range [][]string{
		{"addr", "replace", c.cfg.NodeIP.String() + "/32", "dev", c.cfg.Bridge},
		{"addr", "replace", gw.String(), "dev", c.cfg.Bridge},
		{"link", "set", c.cfg.Bridge, "up"},
		{"route", "replace", c.cfg.ServiceCIDR.String(), "dev", c.cfg.Bridge, "src", c.cfg.NodeIP.String()},
	} {
		if _, err := run(b.IP, cmd...); err != nil {
			return fmt.Errorf("configure node network: %w", err)
		}
	}
	for _, ch := range c.cfg.chains() {
		if err := ensureChain(b.Iptables, ch); err != nil {
			return userError(err, "make sure the iptables package works (`iptables -t nat -S`) and the kernel has netfilter NAT support",
				"cannot install iptables chain %s", ch.name)
		}
	}
	// Chains of ours that are no longer wanted (an older version kept the
	// guards in filter, where an ACCEPT there would bypass the policies).
	if err := sweepChains(b.Iptables, chainPrefix, c.cfg.wantedChain); err != nil {
		return fmt.Errorf("remove stale iptables chains: %w", err)
	}
	// ClusterIP traffic between pods is routed by the host (pod -> DNAT ->
	// pod, in and out of the bridge), so it needs forwarding; bridged
	// replies must pass iptables too, or conntrack cannot undo the DNAT
	// and NetworkPolicies would not see pod-to-pod traffic. Both are
	// recorded before and restored by Down; the FORWARD guard above keeps
	// forwarded pod traffic on the bridge.
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/bridge/bridge-nf-call-iptables", "1"}} {
		if err := os.WriteFile(filepath.Join("/proc/sys", kv[0]), []byte(kv[1]), 0o644); err != nil {
			return userError(err, "load br_netfilter (`modprobe br_netfilter`) and run as root",
				"cannot set %s=%s", strings.ReplaceAll(kv[0], "/", "."), kv[1])
		}
	}
	return c.writeCNIConfig()
}

func ensureLink(ipBin, name, kind string) error {
	if _, err := net.InterfaceByName(name); err == nil {
		return nil
	}
	out, err := run(ipBin, "link", "add", name, "type", kind)
	if err != nil {
		if strings.Contains(out, "Unknown device type") || strings.Contains(out, "not supported") {
			return userError(nil, fmt.Sprintf("load the module with `modprobe %s` (or use a kernel built with it)", kind),
				"the kernel lacks %s network device support", kind)
		}
		return fmt.Errorf("create %s interface %s: %w", kind, name, err)
	}
	return nil
}

func ensureChain(iptables string, ch chain) error {
	if out, err := run(iptables, "-w", "-t", ch.table, "-N", ch.name); err != nil && !strings.Contains(out, "exists") {
		return err
	}
	if _, err := run(iptables, "-w", "-t", ch.table, "-F", ch.name); err != nil {
		return err
	}
	for _, r := range ch.rules {
		if _, err := run(iptables, append([]string{"-w", "-t", ch.table, "-A", ch.name}, r...)...); err != nil {
			return err
		}
	}
	for _, hook := range ch.hooks {
		if _, err := run(iptables, "-w", "-t", ch.table, "-C", hook, "-j", ch.name); err == nil {
			continue
		}
		pos := []string{"-I", hook, "1"}
		if ch.append {
			pos = []string{"-A", hook}
		}
		if _, err := run(iptables, append(append([]string{"-w", "-t", ch.table}, pos...), "-j", ch.name)...); err != nil {
			return err
		}
	}
	return nil
}

// teardownNetwork removes our chains, interfaces (with their routes) and the
// CNI IPAM state. Missing pieces are not errors.
func (c *Cluster) teardownNetwork() error {
	var errs []error
	if ipt, err := lookPath("iptables"); err == nil {
		for _, ch := range c.cfg.chains() {
			for _, hook := range ch.hooks {
				for i := 0; i < 10; i++ { // remove duplicates too
					if _, err := run(ipt, "-w", "-t", ch.table, "-D", hook, "-j", ch.name); err != nil {
						break
					}
				}
			}
			if out, err := run(ipt, "-w", "-t", ch.table, "-F", ch.name); err != nil && !strings.Contains(out, "No chain") && !strings.Contains(out, "does not exist") {
				errs = append(errs, err)
				continue
			}
			_, _ = run(ipt, "-w", "-t", ch.table, "-X", ch.name)
		}
	}
	if ipt, err := lookPath("iptables"); err == nil {
		// Chains of ours under names or tables an older version used.
		if err := sweepChains(ipt, chainPrefix, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if ipBin, err := lookPath("ip"); err == nil {
		for _, name := range []string{c.cfg.Bridge} {
			if _, err := net.InterfaceByName(name); err != nil {
				continue
			}
			if _, err := run(ipBin, "link", "del", name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Allocations of pods that no longer exist would leak addresses.
	if err := os.RemoveAll(c.cfg.cniIPAMDir()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// writeCNIConfig writes the pod network config read by containerd.
func (c *Cluster) writeCNIConfig() error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "agent-sandbox",
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      c.cfg.Bridge,
			"isGateway":   false, // we own the gateway address; keeps ip_forward untouched
			"ipMasq":      false, // no NAT: pods never reach beyond this machine
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": c.cfg.PodCIDR.String(), "gateway": c.cfg.podGateway().String()}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": c.cfg.cniIPAMDir(),
			},
		}},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return fmt.Errorf("encode CNI config: %w", err)
	}
	return writeFileIfChanged(filepath.Join(c.cfg.cniConfDir(), "10-agent-sandbox.conflist"), data, 0o644)
}

// Sysctls the kubelet (protectKernelDefaults=false) or the CNI plugins may
// change. Their original values are recorded before the first start and
// restored by Down.
var trackedSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/ipv4/conf/all/route_localnet",
	"net/netfilter/nf_conntrack_max",
}

// recordSysctls saves the current values unless a record exists already
// (a second Up must not record the kubelet's values as the originals).
func (c Config) recordSysctls() error {
	if _, err := os.Stat(c.sysctlRecord()); err == nil {
		return nil
	}
	vals := map[string]string{}
	for _, k := range trackedSysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			vals[k] = strings.TrimSpace(string(v))
		}
	}
	data, _ := json.MarshalIndent(vals, "", "  ")
	return writeFileIfChanged(c.sysctlRecord(), data, 0o644)
}

// restoreSysctls writes back the recorded values and drops the record.
func (c Config) restoreSysctls() error {
	data, err := os.ReadFile(c.sysctlRecord())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read sysctl record: %w", err)
	}
	var vals map[string]string
	if err := json.Unmarshal(data, &vals); err != nil {
		return fmt.Errorf("parse sysctl record: %w", err)
	}
	var errs []error
	for k, v := range vals {
		p := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s=%s: %w", k, v, err))
		}
	}
	if len(errs) == 0 {
		_ = os.Remove(c.sysctlRecord())
	}
	return errors.Join(errs...)
}

package router

import (
	"net"
	"net/netip"
	"sync"
)

// wellKnownMetadata lists cloud instance-metadata and host-agent endpoints
// that are not covered by the link-local rule. They are refused even when
// the cache claims a pod owns them, because no sandbox pod legitimately does.
var wellKnownMetadata = []netip.Addr{
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud metadata
	netip.MustParseAddr("168.63.129.16"),   // Azure wireserver
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	broadcast   = netip.MustParseAddr("255.255.255.255")
)

// ParsePodIP parses a client-supplied pod address and applies the class
// filter: unspecified, link-local (incl. 169.254.169.254 and fe80::/10),
// multicast, "this network", broadcast and well-known metadata addresses are
// refused; loopback only when allowLoopback. IPv4-mapped IPv6 forms and
// NAT64/6to4 embeddings are judged by the IPv4 address they carry, and
// zoned addresses are refused (a zone selects an interface, not a pod).
func ParsePodIP(s string, allowLoopback bool) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	if !allowedClass(a, allowLoopback) {
		return netip.Addr{}, false
	}
	return a, true
}

// allowedClass is the address-class half of the policy, shared by the header
// check and the final pre-dial check.
func allowedClass(a netip.Addr, allowLoopback bool) bool {
	if !a.IsValid() {
		return false
	}
	a = a.Unmap()
	if a.Is6() && (nat64.Contains(a) || sixToFour.Contains(a)) {
		if v4, ok := embeddedV4(a); ok && !allowedClass(v4, false) {
			return false
		}
	}
	switch {
	case a.IsUnspecified(), a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(),
		a.IsInterfaceLocalMulticast(), a.IsMulticast():
		return false
	case a.Is4() && (thisNetwork.Contains(a) || a == broadcast):
		return false
	case a.IsLoopback():
		return allowLoopback
	}
	for _, m := range wellKnownMetadata {
		if a == m {
			return false
		}
	}
	return true
}

// embeddedV4 extracts the IPv4 address carried by a NAT64 (last 32 bits) or
// 6to4 (bits 16..47) address.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// AddrPolicy is the last gate before a dial. It re-applies the class filter
// to the resolved address (the cache is trusted to name pods, not to be free
// of mistakes) and keeps the router from being pointed at itself.
type AddrPolicy struct {
	AllowLoopback bool

	mu        sync.RWMutex
	selfAddrs map[netip.Addr]struct{}
	selfPorts map[uint16]struct{}
}

// NewAddrPolicy snapshots the host's interface addresses: a non-loopback
// local address is never a sandbox pod (pods have their own network
// namespace), so dialling one could only reach the router or its node.
func NewAddrPolicy(allowLoopback bool) *AddrPolicy {
	p := &AddrPolicy{
		AllowLoopback: allowLoopback,
		selfAddrs:     map[netip.Addr]struct{}{},
		selfPorts:     map[uint16]struct{}{},
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				p.selfAddrs[pfx.Addr().Unmap()] = struct{}{}
			}
		}
	}
	return p
}

// AddSelfPort records a port the router listens on, so that loopback
// targets (allowed only in sidecar/test mode) still cannot loop back into
// the router's own listeners.
func (p *AddrPolicy) AddSelfPort(port uint16) {
	p.mu.Lock()
	p.selfPorts[port] = struct{}{}
	p.mu.Unlock()
}

// Permit reports whether ap may be dialled.
func (p *AddrPolicy) Permit(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap()
	if !allowedClass(a, p.AllowLoopback) {
		return false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if a.IsLoopback() {
		_, self := p.selfPorts[ap.Port()]
		return !self
	}
	_, local := p.selfAddrs[a]
	return !local
}

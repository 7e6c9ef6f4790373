// Package freeport picks TCP ports for test servers that bind them a
// moment later.
//
// The usual trick, listening on :0 and closing, hands out a port from the
// kernel's ephemeral range, the same range the kernel draws the source
// ports of outgoing connections from and the range other test processes
// (envtest's etcd and apiserver among them) pick their own ports from. On
// a busy machine that port is often taken again before the server binds
// it, and the server fails with "address already in use". These ports come
// from below that range and are checked free on every interface.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Below Linux's default ephemeral range (net.ipv4.ip_local_port_range,
// 32768-60999) and above the ports services usually own.
const (
	low  = 20000
	high = 32768
)

// Get returns a port no process listens on and no connection uses.
// The search starts at a random port, so parallel tests rarely meet.
func Get() (int, error) {
	return pick(low, high, rand.IntN(high-low))
}

// pick returns the first free port of [lo, hi), going round from lo+start.
func pick(lo, hi, start int) (int, error) {
	for i := range hi - lo {
		port := lo + (start+i)%(hi-lo)
		// Binding all interfaces fails if any address has the port.
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("releasing port %d: %w", port, err)
		}
		return port, nil
	}
	return 0, fmt.Errorf("no free TCP port in [%d, %d)", lo, hi)
}

// T is Get for tests: it fails the test when no port is free.
func T(tb testing.TB) int {
	tb.Helper()
	port, err := Get()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

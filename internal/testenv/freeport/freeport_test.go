package freeport

import (
	"fmt"
	"net"
	"testing"
)

func TestGetIsBindableAndOutsideTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		port := T(t)
		if port < low || port >= high {
			t.Fatalf("port %d outside [%d, %d)", port, low, high)
		}
		seen[port] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", port, err)
		}
		_ = l.Close()
	}
	if len(seen) < 40 {
		t.Errorf("50 picks gave only %d distinct ports: parallel tests would collide", len(seen))
	}
}

func TestPickSkipsPortsInUse(t *testing.T) {
	// Two adjacent free ports; hold the first.
	var p int
	for {
		p = T(t)
		if p+1 < high {
			if l, err := net.Listen("tcp", fmt.Sprintf(":%d", p+1)); err == nil {
				_ = l.Close()
				break
			}
		}
	}
	held, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if got, err := pick(p, p+2, 0); err != nil || got != p+1 {
		t.Errorf("pick(%d, %d) = %d, %v; want %d: a port listened on by loopback only is in use", p, p+2, got, err, p+1)
	}
	if got, err := pick(p, p+1, 0); err == nil {
		t.Errorf("pick over only a held port = %d, want an error", got)
	}
}

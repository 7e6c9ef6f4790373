package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPForwarder relays every connection accepted on l to target, bytes only,
// so TLS and authentication stay end to end with the real API server
// behind it. Tests use it to stage an API server outage: hand a component
// the address of a listener that does not exist yet, then open it. The
// test's cleanup closes the listener and every relayed connection.
func TCPForwarder(t testing.TB, l net.Listener, target string) {
	t.Helper()
	t.Cleanup(StartTCPForwarder(l, target))
}

// StartTCPForwarder is TCPForwarder for a test that stages an outage in the
// middle: the returned stop closes the listener and every relayed
// connection and waits for the relays to end (safe to call more than once).
// Start another forwarder on the same address to end the outage.
func StartTCPForwarder(l net.Listener, target string) (stop func()) {
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
		once  sync.Once
		done  bool
	)
	// track records a relayed pair, or closes it when stop came first.
	track := func(c ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if done {
			for _, x := range c {
				x.Close()
			}
			return false
		}
		conns = append(conns, c...)
		return true
	}
	stop = func() {
		once.Do(func() {
			l.Close()
			mu.Lock()
			done = true
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			if !track(in, out) {
				return
			}
			wg.Add(2)
			relay := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
			}
			go relay(out, in)
			go relay(in, out)
		}
	}()
	return stop
}

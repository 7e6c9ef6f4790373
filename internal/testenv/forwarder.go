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
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c ...net.Conn) {
		mu.Lock()
		conns = append(conns, c...)
		mu.Unlock()
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
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
			track(in, out)
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
}

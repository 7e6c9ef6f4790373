// Package capbuf is the one "keep the first N bytes" buffer of the tree: a
// command's captured output, a port-forward's stderr, a tool's output for
// an MCP client. The first bytes are what is kept because that is where a
// failing tool says what went wrong; later output mostly repeats it.
package capbuf

import "sync"

// Buffer keeps the first Max bytes written to it and remembers whether more
// came. Write always reports all of p as written, so the goroutine copying
// into it (os/exec, a port-forward) keeps draining its pipe instead of
// failing the producer. It is safe for concurrent use.
type Buffer struct {
	mu        sync.Mutex
	buf       []byte
	max       int
	truncated bool
}

// New returns a Buffer keeping at most max bytes; max <= 0 keeps all.
func New(max int) *Buffer { return &Buffer{max: max} }

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.max <= 0 {
		b.buf = append(b.buf, p...)
		return len(p), nil
	}
	room := max(b.max-len(b.buf), 0)
	if len(p) > room {
		b.truncated = true
	}
	b.buf = append(b.buf, p[:min(room, len(p))]...)
	return len(p), nil
}

// Bytes returns a copy of what was kept.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

// String returns what was kept.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Truncated reports whether bytes were dropped.
func (b *Buffer) Truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.truncated
}

// Max is the bound given to New.
func (b *Buffer) Max() int { return b.max }

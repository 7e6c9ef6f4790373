package capbuf

import (
	"io"
	"strings"
	"sync"
	"testing"
)

func TestBufferKeepsTheFirstBytes(t *testing.T) {
	cases := []struct {
		name      string
		max       int
		writes    []string
		want      string
		truncated bool
	}{
		{"under the bound", 10, []string{"abc", "def"}, "abcdef", false},
		{"exactly the bound", 6, []string{"abc", "def"}, "abcdef", false},
		{"one write over", 4, []string{"abcdef"}, "abcd", true},
		{"later writes dropped", 4, []string{"ab", "cd", "ef"}, "abcd", true},
		{"split across writes", 5, []string{"abc", "def"}, "abcde", true},
		{"no bound", 0, []string{strings.Repeat("x", 100)}, strings.Repeat("x", 100), false},
		{"empty", 3, nil, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := New(c.max)
			for _, w := range c.writes {
				// Every write must look complete, or io.Copy would stop.
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if b.String() != c.want || string(b.Bytes()) != c.want || b.Truncated() != c.truncated {
				t.Fatalf("got %q truncated=%v, want %q truncated=%v", b.String(), b.Truncated(), c.want, c.truncated)
			}
		})
	}
}

// A producer writing more than the bound is drained to the end.
func TestBufferDrainsACopy(t *testing.T) {
	b := New(8)
	n, err := io.Copy(b, strings.NewReader(strings.Repeat("y", 1<<20)))
	if err != nil || n != 1<<20 || b.String() != "yyyyyyyy" || !b.Truncated() {
		t.Fatalf("copied %d, %v; kept %q", n, err, b.String())
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	b := New(100)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_, _ = b.Write([]byte("z"))
			}
		}()
	}
	wg.Wait()
	if len(b.Bytes()) != 100 || !b.Truncated() {
		t.Fatalf("kept %d bytes, truncated=%v", len(b.Bytes()), b.Truncated())
	}
}

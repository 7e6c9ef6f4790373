package bench

import (
	"os"
	"strings"
	"testing"
)

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS(strings.NewReader("Name:\tx\nVmHWM:\t  9000 kB\nVmRSS:\t  1234 kB\nThreads:\t4\n"))
	if err != nil || got != 1234*1024 {
		t.Fatalf("parseVmRSS = %v, %v; want %d", got, err, 1234*1024)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := parseVmRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("parseVmRSS(%q): want an error", bad)
		}
	}
	// This process's own RSS is real and positive.
	if rss, err := ProcRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("ProcRSS(self) = %v, %v", rss, err)
	}
}

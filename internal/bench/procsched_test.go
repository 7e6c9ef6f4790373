package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseSchedStat(t *testing.T) {
	run, wait, err := parseSchedStat([]byte("1500000000 250000000 42\n"))
	if err != nil || run != 1500*time.Millisecond || wait != 250*time.Millisecond {
		t.Errorf("got %v %v %v", run, wait, err)
	}
	if _, _, err := parseSchedStat([]byte("garbage")); err == nil {
		t.Errorf("garbage parsed")
	}
}

// The test process itself has run for some time: its own schedstat says so.
func TestProcSchedStatOfSelf(t *testing.T) {
	s, err := ProcSchedStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.Run <= 0 {
		t.Errorf("run time %v, want > 0", s.Run)
	}
}

package localcluster

import (
	"slices"
	"testing"
)

func TestParseMemTotal(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
	}{
		{"meminfo", "MemTotal:       24608340 kB\nMemFree:         1000 kB\n", 24608340 << 10},
		{"not first", "MemFree: 1 kB\nMemTotal: 2048 kB\n", 2048 << 10},
		{"missing", "MemFree: 1 kB\n", 0},
		{"garbage", "MemTotal: lots kB\n", 0},
		{"negative", "MemTotal: -5 kB\n", 0},
		{"other unit", "MemTotal: 5 MB\n", 0},
		{"empty", "", 0},
	} {
		if got := parseMemTotal(tc.in); got != tc.want {
			t.Errorf("%s: parseMemTotal = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAPIServerMemoryLimit(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct{ mem, want int64 }{
		{0, gib},             // unknown memory: the floor
		{2 * gib, gib},       // small machine: the floor
		{24 * gib, 3 * gib},  // this project's dev machine: an eighth
		{256 * gib, 4 * gib}, // big machine: the cap
	} {
		if got := apiServerMemoryLimit(tc.mem); got != tc.want {
			t.Errorf("apiServerMemoryLimit(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
}

// The apiserver `up` starts carries the GC settings of the config, and a
// zero config leaves Go's defaults alone (no GOGC/GOMEMLIMIT at all).
func TestAPIServerSpecGoEnv(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.APIServerGOGC != 400 || cfg.APIServerMemoryLimit < 1<<30 {
		t.Fatalf("DefaultConfig: APIServerGOGC=%d APIServerMemoryLimit=%d, want 400 and >= 1 GiB", cfg.APIServerGOGC, cfg.APIServerMemoryLimit)
	}
	cfg.APIServerMemoryLimit = 3 << 30
	env := New(cfg, nil).apiServerSpec().env
	for _, want := range []string{"PATH=" + basePath, "GOGC=400", "GOMEMLIMIT=3221225472"} {
		if !slices.Contains(env, want) {
			t.Errorf("apiserver env %q lacks %q", env, want)
		}
	}

	cfg.APIServerGOGC, cfg.APIServerMemoryLimit = 0, 0
	env = New(cfg, nil).apiServerSpec().env
	if !slices.Equal(env, []string{"PATH=" + basePath}) {
		t.Errorf("zero GC config: apiserver env = %q, want only PATH", env)
	}

	// A changed GC setting is a changed definition: the next `up` restarts
	// the apiserver with it.
	a := New(DefaultConfig(), nil).apiServerSpec().hash()
	cfg = DefaultConfig()
	cfg.APIServerGOGC = 200
	if b := New(cfg, nil).apiServerSpec().hash(); a == b {
		t.Error("apiserver spec hash ignores GOGC")
	}
}

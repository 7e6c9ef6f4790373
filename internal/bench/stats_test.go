package bench

import (
	"math/rand"
	"testing"
	"time"
)

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestSummarizeKnownValues(t *testing.T) {
	// 1..100 ms shuffled: nearest-rank percentiles are exact sample values.
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	rand.New(rand.NewSource(1)).Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	got := Summarize(s)
	want := Summary{Count: 100, Min: 1 * time.Millisecond, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond,
		P99: 99 * time.Millisecond, Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if s[0] == time.Millisecond && s[1] == 2*time.Millisecond {
		t.Fatalf("input was not shuffled; test would not catch a missing sort")
	}
}

func TestPercentileEdges(t *testing.T) {
	cases := []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2), 50, 1 * time.Millisecond},
		{ms(1, 2), 51, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{ms(1, 2, 3), 0, 1 * time.Millisecond},
	}
	for _, c := range cases {
		if got := Percentile(c.in, c.p); got != c.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", c.in, c.p, got, c.want)
		}
	}
	if (Summarize(nil) != Summary{}) {
		t.Errorf("empty summary must be zero")
	}
}

func TestTraceOrdering(t *testing.T) {
	t0 := time.Unix(100, 0)
	tr := NewTrace("c", t0)
	tr.Mark(Created, t0.Add(2*time.Millisecond))
	tr.Mark(Bound, t0.Add(5*time.Millisecond))
	tr.Mark(Bound, t0.Add(50*time.Millisecond)) // first sighting wins
	tr.Mark(Ready, t0.Add(6*time.Millisecond))
	if err := tr.Validate(); err != nil {
		t.Fatalf("ordered trace rejected: %v", err)
	}
	if d, _ := tr.Since(Bound); d != 5*time.Millisecond {
		t.Errorf("Bound = %v", d)
	}
	bad := NewTrace("b", t0)
	bad.Mark(Created, t0.Add(10*time.Millisecond))
	bad.Mark(Ready, t0.Add(5*time.Millisecond))
	if err := bad.Validate(); err == nil {
		t.Errorf("Ready before Created must be rejected")
	}
	early := NewTrace("e", t0)
	early.Mark(Created, t0.Add(-time.Millisecond))
	if err := early.Validate(); err == nil {
		t.Errorf("a milestone before the start must be rejected")
	}
	// Skipped milestones are fine.
	skip := NewTrace("s", t0)
	skip.Mark(Ready, t0.Add(time.Millisecond))
	if err := skip.Validate(); err != nil {
		t.Errorf("missing milestones must be allowed: %v", err)
	}
}

func TestMilestoneSummaries(t *testing.T) {
	t0 := time.Unix(0, 0)
	var traces []*ClaimTrace
	for i := 1; i <= 4; i++ {
		tr := NewTrace("c", t0)
		tr.Mark(Ready, t0.Add(time.Duration(i)*10*time.Millisecond))
		if i%2 == 0 {
			tr.Mark(Bound, t0.Add(time.Duration(i)*time.Millisecond))
		}
		traces = append(traces, tr)
	}
	got := MilestoneSummaries(traces)
	if got[Ready].Count != 4 || got[Ready].P50 != 20*time.Millisecond || got[Ready].Max != 40*time.Millisecond {
		t.Errorf("ready = %+v", got[Ready])
	}
	if got[Bound].Count != 2 || got[Bound].P99 != 4*time.Millisecond {
		t.Errorf("bound = %+v", got[Bound])
	}
	if _, ok := got[FirstOutput]; ok {
		t.Errorf("a milestone nobody reached must be absent")
	}
}

func TestSplitWrites(t *testing.T) {
	r := &Result{Claims: 10, Writes: RequestCounts{
		"POST sandboxclaims": 10, "PUT sandboxclaims/status": 10, "PATCH sandboxes": 11, "PATCH pods": 10,
		"POST sandboxes": 10, "POST pods": 10, "PATCH sandboxes/status": 20, "PATCH pods/status": 10, "POST pods/binding": 10,
		"PUT leases": 7, "POST events": 40, "DELETE sandboxclaims": 10, "DELETE sandboxes": 10, "DELETE pods": 10,
	}}
	r.splitWrites()
	if r.ClientWrites != 2 || r.ClaimPathWrites != 3.1 || r.RefillWrites != 6 || r.TeardownWrites != 2 || r.EventWrites != 4 || r.WritesPerClaim != 17.1 {
		t.Errorf("split = client %v claim %v refill %v teardown %v events %v total %v",
			r.ClientWrites, r.ClaimPathWrites, r.RefillWrites, r.TeardownWrites, r.EventWrites, r.WritesPerClaim)
	}
}

func TestArrivals(t *testing.T) {
	got := arrivals(Config{Scenario: Sustained, Rate: 100, Duration: 30 * time.Second, Seed: 7})
	// A Poisson process at 100/s over 30 s: 3000 expected, sd ~55.
	if len(got) < 2700 || len(got) > 3300 {
		t.Errorf("%d arrivals for 100/s over 30 s", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] || got[i] >= 30*time.Second {
			t.Fatalf("arrivals out of order or window at %d", i)
		}
	}
	if n := len(arrivals(Config{Scenario: Burst, Count: 300})); n != 300 {
		t.Errorf("burst arrivals = %d", n)
	}
	again := arrivals(Config{Scenario: Sustained, Rate: 100, Duration: 30 * time.Second, Seed: 7})
	if len(again) != len(got) || again[10] != got[10] {
		t.Errorf("same seed must give the same arrivals")
	}
}

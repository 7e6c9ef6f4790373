package warmpool

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(10000, 0)

func TestReplenishHold(t *testing.T) {
	s := newRefillShaper(10*time.Second, 0)
	if h := s.hold("p", 5, 5, t0); h != 0 {
		t.Fatalf("first observation held %s", h)
	}
	// Two members adopted: the drop arms the hold.
	if h := s.hold("p", 3, 5, t0.Add(time.Second)); h != 10*time.Second {
		t.Fatalf("hold after drop = %s, want 10s", h)
	}
	if h := s.hold("p", 3, 5, t0.Add(4*time.Second)); h != 7*time.Second {
		t.Fatalf("hold while waiting = %s, want 7s", h)
	}
	// A further drop re-arms.
	if h := s.hold("p", 2, 5, t0.Add(5*time.Second)); h != 10*time.Second {
		t.Fatalf("re-armed hold = %s, want 10s", h)
	}
	if h := s.hold("p", 2, 5, t0.Add(15*time.Second)); h != 0 {
		t.Fatalf("hold after the window = %s", h)
	}
	// Back at the target clears the hold.
	s.hold("p", 1, 5, t0.Add(16*time.Second))
	if h := s.hold("p", 5, 5, t0.Add(17*time.Second)); h != 0 {
		t.Fatalf("hold at target = %s", h)
	}
	s.forget("p")
	if h := s.hold("p", 1, 5, t0.Add(18*time.Second)); h != 0 {
		t.Fatalf("forgotten pool held %s", h)
	}
}

func TestReplenishHoldOffKeepsNoState(t *testing.T) {
	s := newRefillShaper(0, 0)
	if h := s.hold("p", 0, 5, t0); h != 0 {
		t.Fatal("delay 0 must never hold")
	}
	if n, w := s.grant("p", 300, t0); n != 300 || w != 0 {
		t.Fatalf("rate 0 grant = %d, %s; want the whole deficit", n, w)
	}
	if len(s.pools) != 0 {
		t.Fatal("shaping off must keep no state")
	}
}

func TestRefillTokenBucket(t *testing.T) {
	s := newRefillShaper(0, 2) // 2 creates/s, bucket of 2
	if n, _ := s.grant("p", 10, t0); n != 2 {
		t.Fatalf("full bucket grant = %d, want 2", n)
	}
	n, wait := s.grant("p", 10, t0)
	if n != 0 || wait != 500*time.Millisecond {
		t.Fatalf("empty bucket: %d, %s; want 0 and 500ms to the next token", n, wait)
	}
	if n, _ := s.grant("p", 10, t0.Add(time.Second)); n != 2 {
		t.Fatalf("after 1s grant = %d, want 2", n)
	}
	// The bucket caps at one second of creates.
	if n, _ := s.grant("p", 10, t0.Add(time.Hour)); n != 2 {
		t.Fatalf("after an hour grant = %d, want the cap 2", n)
	}
	// Refunds return unused grants, capped.
	s.refund("p", 5)
	if n, _ := s.grant("p", 10, t0.Add(time.Hour)); n != 2 {
		t.Fatalf("refund not capped: %d", n)
	}
}

func TestRefillFractionalAndHugeRates(t *testing.T) {
	s := newRefillShaper(0, 0.5) // bucket capacity max(1, r) = 1
	if n, _ := s.grant("p", 3, t0); n != 1 {
		t.Fatalf("fractional first grant = %d", n)
	}
	if n, w := s.grant("p", 3, t0.Add(time.Second)); n != 0 || w != time.Second {
		t.Fatalf("half a token: %d, %s; want 0 and 1s", n, w)
	}
	huge := newRefillShaper(0, 1e300)
	if n, _ := huge.grant("p", 7, t0); n != 7 {
		t.Fatalf("huge rate grant = %d", n)
	}
	if n, _ := huge.grant("p", 7, t0.Add(time.Nanosecond)); n < 0 {
		t.Fatal("negative grant")
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), -1} {
		if newRefillShaper(0, bad).rate != 0 {
			t.Errorf("rate %v not treated as off", bad)
		}
	}
}

package warmpool

import (
	"math"
	"sync"
	"time"
)

// refillShaper holds the opt-in refill shaping state of every pool: a
// replenish hold (wait ReplenishDelay after the pool shrinks before
// refilling, so a burst of claims does not trigger a burst of creates on
// every drop) and a token bucket (at most MaxRefillRate creates per second
// per pool). With both off it keeps no state and grants the whole deficit.
type refillShaper struct {
	delay time.Duration
	rate  float64

	mu    sync.Mutex
	pools map[string]*refillState
}

type refillState struct {
	seen       bool
	lastCount  int
	deferUntil time.Time

	bucketInit bool
	tokens     float64
	lastFill   time.Time
}

func newRefillShaper(delay time.Duration, rate float64) *refillShaper {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0 {
		rate = 0
	}
	return &refillShaper{delay: delay, rate: rate, pools: map[string]*refillState{}}
}

func (s *refillShaper) state(key string) *refillState {
	st, ok := s.pools[key]
	if !ok {
		st = &refillState{}
		s.pools[key] = st
	}
	return st
}

// hold returns how long refilling key must still wait. It observes the
// current member count on every pass: a drop re-arms the hold, reaching the
// target clears it, and the first observation never holds.
func (s *refillShaper) hold(key string, current, desired int, now time.Time) time.Duration {
	if s.delay <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(key)
	switch {
	case current >= desired:
		st.deferUntil = time.Time{}
	case st.seen && current < st.lastCount:
		st.deferUntil = now.Add(s.delay)
	}
	st.seen = true
	st.lastCount = current
	if left := st.deferUntil.Sub(now); left > 0 && current < desired {
		return left
	}
	return 0
}

func (s *refillShaper) capacity() float64 { return math.Max(1, s.rate) }

// grant returns how many of deficit creates may start now and, when none
// may, how long until the next token.
func (s *refillShaper) grant(key string, deficit int, now time.Time) (int, time.Duration) {
	if s.rate <= 0 || deficit <= 0 {
		return max(deficit, 0), 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(key)
	if !st.bucketInit {
		st.bucketInit, st.tokens, st.lastFill = true, s.capacity(), now
	}
	if el := now.Sub(st.lastFill).Seconds(); el > 0 {
		st.tokens = math.Min(s.capacity(), st.tokens+el*s.rate)
		st.lastFill = now
	}
	n := int(math.Min(float64(deficit), math.Floor(st.tokens)))
	if n <= 0 {
		wait := time.Duration((1 - st.tokens) / s.rate * float64(time.Second))
		return 0, max(wait, time.Millisecond)
	}
	st.tokens -= float64(n)
	return n, 0
}

// refund returns tokens for creates that were granted but never attempted.
func (s *refillShaper) refund(key string, n int) {
	if s.rate <= 0 || n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state(key)
	st.tokens = math.Min(s.capacity(), st.tokens+float64(n))
}

func (s *refillShaper) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pools, key)
}

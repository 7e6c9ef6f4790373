package manager

import (
	"net/http"
	"net/http/pprof"
	"runtime"

	"github.com/felixge/fgprof"
)

// PProf exposes Go profiles on the metrics server, never on a port of
// their own and never by default: a profile shows memory contents and the
// endpoints cost CPU, so they are only there when an operator asks.
type PProf struct {
	// Enabled serves /debug/pprof/profile (CPU) only (--enable-pprof).
	Enabled bool
	// Debug serves every pprof endpoint and /debug/fgprof (wall clock,
	// on-CPU and off-CPU together), and turns on block and mutex
	// profiling (--enable-pprof-debug; implies Enabled).
	Debug bool
	// BlockProfileRate is runtime.SetBlockProfileRate's argument with
	// Debug (--pprof-block-profile-rate); negative means 0.
	BlockProfileRate int
	// MutexProfileFraction is runtime.SetMutexProfileFraction's argument
	// with Debug (--pprof-mutex-profile-fraction); negative means 0.
	MutexProfileFraction int
}

// handlers returns the endpoints to add to the metrics server, and applies
// the runtime profiling rates when Debug is set.
func (p PProf) handlers() map[string]http.Handler {
	if !p.Enabled && !p.Debug {
		return nil
	}
	h := map[string]http.Handler{"/debug/pprof/profile": http.HandlerFunc(pprof.Profile)}
	if !p.Debug {
		return h
	}
	runtime.SetBlockProfileRate(max(p.BlockProfileRate, 0))
	runtime.SetMutexProfileFraction(max(p.MutexProfileFraction, 0))
	// pprof.Index also serves the named profiles (heap, goroutine, block,
	// mutex, allocs, threadcreate) below its prefix.
	h["/debug/pprof/"] = http.HandlerFunc(pprof.Index)
	h["/debug/pprof/cmdline"] = http.HandlerFunc(pprof.Cmdline)
	h["/debug/pprof/symbol"] = http.HandlerFunc(pprof.Symbol)
	h["/debug/pprof/trace"] = http.HandlerFunc(pprof.Trace)
	h["/debug/fgprof"] = oneAtATime(fgprof.Handler())
	return h
}

// oneAtATime serves one request at a time and answers 429 to the others:
// two concurrent wall-clock profiles would sample each other.
func oneAtATime(next http.Handler) http.Handler {
	busy := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case busy <- struct{}{}:
			defer func() { <-busy }()
			next.ServeHTTP(w, r)
		default:
			http.Error(w, "a profile is already being taken; try again when it ends", http.StatusTooManyRequests)
		}
	})
}

// Package bench measures what users compare sandboxes by: how long a claim
// takes to reach each milestone (created, bound, Ready, runtime answering,
// first command output), how many apiserver writes each claim costs, and
// what the controller spends doing it. It drives any cluster through a
// kubeconfig; `agent-sandbox bench` is its command line.
package bench

import (
	"math"
	"sort"
	"time"
)

// Summary describes a set of durations.
type Summary struct {
	Count int           `json:"count"`
	Min   time.Duration `json:"min_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
	Mean  time.Duration `json:"mean_ns"`
}

// Summarize computes the summary of samples. Percentiles use the
// nearest-rank method: the p-th percentile is the smallest sample such that
// at least p% of the samples are less than or equal to it, so every
// reported value is one that was actually measured.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Summary{
		Count: len(s),
		Min:   s[0],
		P50:   Percentile(s, 50),
		P90:   Percentile(s, 90),
		P99:   Percentile(s, 99),
		Max:   s[len(s)-1],
		Mean:  sum / time.Duration(len(s)),
	}
}

// Percentile returns the nearest-rank p-th percentile of sorted samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

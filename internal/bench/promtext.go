package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
)

// Samples are the values of one Prometheus text exposition, summed over
// every label set but the ones a caller asks for: name -> value, and for
// histograms name_bucket -> le -> cumulative count.
type Samples struct {
	Values  map[string]float64
	Buckets map[string]map[float64]float64
}

// parseSamples reads the metrics named in want (histograms by their base
// name) from Prometheus text format, summing across label sets.
func parseSamples(r io.Reader, want ...string) (*Samples, error) {
	s := &Samples{Values: map[string]float64{}, Buckets: map[string]map[float64]float64{}}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w] = true
	}
	err := scanSamples(r, func(name, labels string, v float64) {
		base, isBucket := strings.CutSuffix(name, "_bucket")
		switch {
		case isBucket && wanted[base]:
			le, err := strconv.ParseFloat(parseLabels(labels)["le"], 64)
			if err != nil {
				return
			}
			if s.Buckets[base] == nil {
				s.Buckets[base] = map[float64]float64{}
			}
			s.Buckets[base][le] += v
		case wanted[name] || wanted[strings.TrimSuffix(strings.TrimSuffix(name, "_count"), "_sum")]:
			s.Values[name] += v
		}
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// scanSamples calls fn for every sample line of a Prometheus text
// exposition with the metric's name, its raw label list (between the
// braces, "" without) and its value. Comments and blank lines are skipped;
// a value that is not a number is an error.
func scanSamples(r io.Reader, fn func(name, labels string, value float64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			name := line[:i]
			end := strings.LastIndexByte(line, '}')
			if end < i {
				continue
			}
			labels, line = line[i+1:end], name+line[end+1:]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return fmt.Errorf("parsing %q: %w", sc.Text(), err)
		}
		fn(f[0], labels, v)
	}
	return sc.Err()
}

// Histogram is a cumulative Prometheus histogram: upper bound -> count.
type Histogram map[float64]float64

// Sub returns h - before, bucket by bucket.
func (h Histogram) Sub(before Histogram) Histogram {
	out := Histogram{}
	for le, v := range h {
		out[le] = v - before[le]
	}
	return out
}

// Count is the number of observations (the +Inf bucket).
func (h Histogram) Count() float64 { return h[math.Inf(1)] }

// Quantile estimates the q-quantile (0..1) as Prometheus's
// histogram_quantile does, which is how the reference's gate reads its
// thresholds: linear interpolation inside the bucket holding the rank,
// the lowest bucket interpolated from 0, the +Inf bucket reported as the
// highest finite bound. NaN when there are no observations.
func (h Histogram) Quantile(q float64) float64 {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	total := h.Count()
	if total <= 0 || len(bounds) < 2 {
		return math.NaN()
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, le := range bounds {
		c := h[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevBound
			}
			if c == prevCount {
				return le
			}
			return prevBound + (le-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = le, c
	}
	return prevBound
}

// scrapeURL fetches a plain-HTTP metrics endpoint (the controller's).
func scrapeURL(ctx context.Context, url string, want ...string) (*Samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	return parseSamples(resp.Body, want...)
}

// scrapeAPIServer fetches the apiserver's /metrics through cfg.
func scrapeAPIServer(ctx context.Context, cfg *rest.Config, want ...string) (*Samples, error) {
	body, err := apiserverMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	return parseSamples(body, want...)
}

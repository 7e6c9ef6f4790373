package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// writeVerbs are the apiserver_request_total verbs that change state.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}

// RequestCounts maps "VERB resource[/subresource]" to a count.
type RequestCounts map[string]float64

// Sub returns c - before, keeping only positive deltas.
func (c RequestCounts) Sub(before RequestCounts) RequestCounts {
	out := RequestCounts{}
	for k, v := range c {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// Total sums the counts whose resource is one of resources (all when none).
func (c RequestCounts) Total(resources ...string) float64 {
	var n float64
	for k, v := range c {
		res := k[strings.IndexByte(k, ' ')+1:]
		if len(resources) == 0 {
			n += v
			continue
		}
		for _, r := range resources {
			if r == res {
				n += v
			}
		}
	}
	return n
}

// Keys returns the keys sorted.
func (c RequestCounts) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ScrapeAPIServerWrites reads the apiserver's own request counter
// (apiserver_request_total) and returns the write requests by verb and
// resource. It counts every client, so run benchmarks on a quiet cluster.
func ScrapeAPIServerWrites(ctx context.Context, cfg *rest.Config) (RequestCounts, error) {
	body, err := apiserverMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	return parseRequestTotals(body)
}

// apiserverMetrics opens the apiserver's /metrics through cfg.
func apiserverMetrics(ctx context.Context, cfg *rest.Config) (io.ReadCloser, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("apiserver metrics client: %w", err)
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading apiserver /metrics (the benchmark needs permission to GET /metrics): %w", err)
	}
	return body, nil
}

// parseRequestTotals extracts write counts from Prometheus text format.
func parseRequestTotals(r io.Reader) (RequestCounts, error) {
	return parseRequestTotalsWhere(r, func(string) bool { return true })
}

// ScrapeAPIServerFailedWrites is ScrapeAPIServerWrites for the write
// requests the apiserver answered with an error code (4xx, 5xx): a
// status patch on a Sandbox deleted meanwhile (404) wrote nothing.
func ScrapeAPIServerFailedWrites(ctx context.Context, cfg *rest.Config) (RequestCounts, error) {
	body, err := apiserverMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	return parseRequestTotalsWhere(body, func(code string) bool { return code != "" && code[0] != '2' })
}

// parseRequestTotalsWhere is parseRequestTotals for the requests whose
// HTTP code keep accepts.
func parseRequestTotalsWhere(r io.Reader, keep func(code string) bool) (RequestCounts, error) {
	out := RequestCounts{}
	err := scanSamples(r, func(name, raw string, v float64) {
		if name != "apiserver_request_total" {
			return
		}
		labels := parseLabels(raw)
		if !writeVerbs[labels["verb"]] || !keep(labels["code"]) {
			return
		}
		out[labels["verb"]+" "+resourceKey(labels)] += v
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// resourceKey is "resource[/subresource]" of a request's labels.
func resourceKey(labels map[string]string) string {
	if sub := labels["subresource"]; sub != "" {
		return labels["resource"] + "/" + sub
	}
	return labels["resource"]
}

// parseLabels parses `a="x",b="y"` (values may contain escaped quotes).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s); i++ {
			if s[i] == '\\' && i+1 < len(s) {
				val.WriteByte(s[i+1])
				i++
				continue
			}
			if s[i] == '"' {
				break
			}
			val.WriteByte(s[i])
		}
		out[key] = val.String()
		s = strings.TrimPrefix(s[min(i+1, len(s)):], ",")
	}
	return out
}

// ScrapeProcess reads process_cpu_seconds_total and
// process_resident_memory_bytes from a Prometheus endpoint (the
// controller's /metrics).
func ScrapeProcess(ctx context.Context, url string) (cpuSeconds, rssBytes float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "process_cpu_seconds_total":
			cpuSeconds, _ = strconv.ParseFloat(f[1], 64)
		case "process_resident_memory_bytes":
			rssBytes, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return cpuSeconds, rssBytes, sc.Err()
}

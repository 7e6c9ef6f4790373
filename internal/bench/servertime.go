package bench

import (
	"context"
	"io"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// claimPathResources are the resources a claim's writes go to. Their
// server-side times say where a warm claim's latency goes: a warm claim is
// the client's create, the controller's adoption patch of a Sandbox and
// its status patch of the claim, one after another, and each is mostly the
// apiserver's and etcd's time, not the controller's.
var claimPathResources = map[string]bool{"sandboxclaims": true, "sandboxes": true}

// etcdWriteOps are the etcd_request_duration_seconds operations that write.
var etcdWriteOps = map[string]bool{"create": true, "update": true, "delete": true}

// ServerTime is the apiserver's own account of one kind of request during
// a run: how many it served and their mean duration.
type ServerTime struct {
	Count float64       `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
}

// ServerTimes maps "VERB resource[/subresource]" (the apiserver's
// apiserver_request_duration_seconds, the whole request as the apiserver
// saw it) and "etcd OPERATION resource" (etcd_request_duration_seconds,
// the apiserver's calls to etcd; etcd does not tell a status write from
// any other update) to their times.
type ServerTimes map[string]ServerTime

// Keys returns the keys sorted: the apiserver's requests, then etcd's.
func (t ServerTimes) Keys() []string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		ei, ej := strings.HasPrefix(keys[i], "etcd "), strings.HasPrefix(keys[j], "etcd ")
		if ei != ej {
			return ej
		}
		return keys[i] < keys[j]
	})
	return keys
}

// durationTotals are cumulative sums and counts of duration histograms,
// keyed like ServerTimes.
type durationTotals map[string]struct{ sum, count float64 }

// Sub returns the times of the requests served between before and t.
func (t durationTotals) Sub(before durationTotals) ServerTimes {
	out := ServerTimes{}
	for k, v := range t {
		n := v.count - before[k].count
		if n <= 0 {
			continue
		}
		sum := v.sum - before[k].sum
		out[k] = ServerTime{Count: n, Mean: time.Duration(sum / n * float64(time.Second))}
	}
	return out
}

// scrapeServerTimes reads the apiserver's request and etcd durations of
// the claim path's write requests.
func scrapeServerTimes(ctx context.Context, cfg *rest.Config) (durationTotals, error) {
	body, err := apiserverMetrics(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	return parseDurationTotals(body)
}

// parseDurationTotals extracts the _sum and _count series of
// apiserver_request_duration_seconds (write verbs) and
// etcd_request_duration_seconds (write operations) for claimPathResources,
// summed over the label sets it does not key by (API version, scope).
func parseDurationTotals(r io.Reader) (durationTotals, error) {
	out := durationTotals{}
	err := scanSamples(r, func(name, raw string, v float64) {
		metric, isSum := strings.CutSuffix(name, "_sum")
		if !isSum {
			var isCount bool
			if metric, isCount = strings.CutSuffix(name, "_count"); !isCount {
				return
			}
		}
		if metric != "apiserver_request_duration_seconds" && metric != "etcd_request_duration_seconds" {
			return
		}
		labels := parseLabels(raw)
		if !claimPathResources[labels["resource"]] {
			return
		}
		var key string
		switch {
		case metric == "etcd_request_duration_seconds" && etcdWriteOps[labels["operation"]]:
			key = "etcd " + labels["operation"] + " " + labels["resource"]
		case metric == "apiserver_request_duration_seconds" && writeVerbs[labels["verb"]]:
			key = labels["verb"] + " " + resourceKey(labels)
		default:
			return
		}
		tot := out[key]
		if isSum {
			tot.sum += v
		} else {
			tot.count += v
		}
		out[key] = tot
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

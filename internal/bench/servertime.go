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

// conversionMetric is the apiserver's histogram of its calls to CRD
// conversion webhooks. A write of a custom resource costs one call for
// every served version other than the storage version even when no client
// reads that version: the apiserver keeps a watch cache per served version
// and converts every change into each of them
// (kubernetes/kubernetes#129979). A run reports them as the load they are
// on the apiserver and the controller.
const conversionMetric = "apiserver_crd_conversion_webhook_duration_seconds"

// conversionKeyPrefix starts the ServerTimes keys of conversion calls:
// "convert RESOURCE FROM->TO", with " failed" for calls that failed.
const conversionKeyPrefix = "convert "

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
		var key string
		labels := parseLabels(raw)
		switch {
		case metric == conversionMetric:
			key = conversionKey(labels)
		case metric != "apiserver_request_duration_seconds" && metric != "etcd_request_duration_seconds":
			return
		case !claimPathResources[labels["resource"]]:
			return
		case metric == "etcd_request_duration_seconds" && etcdWriteOps[labels["operation"]]:
			key = "etcd " + labels["operation"] + " " + labels["resource"]
		case metric == "apiserver_request_duration_seconds" && writeVerbs[labels["verb"]]:
			key = labels["verb"] + " " + resourceKey(labels)
		default:
			return
		}
		if key == "" {
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

// conversionKey names a conversion series by the CRD's resource (its name
// up to the first dot) and the direction of the conversion.
func conversionKey(labels map[string]string) string {
	resource, _, _ := strings.Cut(labels["crd_name"], ".")
	if resource == "" {
		return ""
	}
	key := conversionKeyPrefix + resource + " " + labels["from_version"] + "->" + labels["to_version"]
	if labels["succeeded"] == "false" {
		key += " failed"
	}
	return key
}

// splitConversions separates the conversion webhook calls from the writes.
func (t ServerTimes) splitConversions() (writes, conversions ServerTimes) {
	writes, conversions = ServerTimes{}, ServerTimes{}
	for k, v := range t {
		if strings.HasPrefix(k, conversionKeyPrefix) {
			conversions[k] = v
		} else {
			writes[k] = v
		}
	}
	return writes, conversions
}

// calls is the number of calls in t.
func (t ServerTimes) calls() float64 {
	var n float64
	for _, v := range t {
		n += v.Count
	}
	return n
}

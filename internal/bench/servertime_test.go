package bench

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// durationMetrics is a cut of a real apiserver's /metrics: two API
// versions of the same write, a status subresource, reads and other
// resources that must be left out, and etcd's series.
const durationMetrics = `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1beta1",le="0.005"} 3
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1beta1"} 0.07
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1beta1"} 9
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1alpha1"} 0.01
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1alpha1"} 1
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="status",verb="PATCH",version="v1beta1"} 0.12
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="status",verb="PATCH",version="v1beta1"} 10
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="namespace",subresource="",verb="LIST",version="v1beta1"} 3
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="namespace",subresource="",verb="LIST",version="v1beta1"} 4
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 50
apiserver_request_sli_duration_seconds_sum{component="apiserver",dry_run="",group="agents.x-k8s.io",resource="sandboxes",scope="resource",subresource="",verb="PATCH",version="v1beta1"} 9
apiserver_request_sli_duration_seconds_count{component="apiserver",dry_run="",group="agents.x-k8s.io",resource="sandboxes",scope="resource",subresource="",verb="PATCH",version="v1beta1"} 9
# TYPE etcd_request_duration_seconds histogram
etcd_request_duration_seconds_sum{group="extensions.agents.x-k8s.io",operation="create",resource="sandboxclaims"} 0.05
etcd_request_duration_seconds_count{group="extensions.agents.x-k8s.io",operation="create",resource="sandboxclaims"} 10
etcd_request_duration_seconds_sum{group="extensions.agents.x-k8s.io",operation="get",resource="sandboxclaims"} 1
etcd_request_duration_seconds_count{group="extensions.agents.x-k8s.io",operation="get",resource="sandboxclaims"} 100
etcd_request_duration_seconds_sum{group="",operation="update",resource="pods"} 1
etcd_request_duration_seconds_count{group="",operation="update",resource="pods"} 10
`

func TestParseDurationTotals(t *testing.T) {
	got, err := parseDurationTotals(strings.NewReader(durationMetrics))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %v, want POST sandboxclaims, PATCH sandboxclaims/status and etcd create sandboxclaims only", got)
	}
	if v := got["POST sandboxclaims"]; v.count != 10 || v.sum < 0.0799 || v.sum > 0.0801 {
		t.Errorf("POST sandboxclaims = %+v, want both API versions summed (0.08 s over 10)", v)
	}
	if v := got["PATCH sandboxclaims/status"]; v.count != 10 || v.sum != 0.12 {
		t.Errorf("PATCH sandboxclaims/status = %+v", v)
	}
	if v := got["etcd create sandboxclaims"]; v.count != 10 || v.sum != 0.05 {
		t.Errorf("etcd create sandboxclaims = %+v", v)
	}
}

func TestServerTimesOfTheWindow(t *testing.T) {
	before := durationTotals{
		"POST sandboxclaims":         {sum: 1, count: 100},
		"PATCH sandboxes":            {sum: 2, count: 50},
		"etcd update sandboxclaims":  {sum: 0.5, count: 100},
		"PATCH sandboxclaims/status": {sum: 1, count: 100},
	}
	after := durationTotals{
		"POST sandboxclaims":         {sum: 1.07, count: 110},
		"PATCH sandboxes":            {sum: 2, count: 50},
		"etcd update sandboxclaims":  {sum: 0.56, count: 110},
		"PATCH sandboxclaims/status": {sum: 1.12, count: 110},
		"DELETE sandboxclaims":       {sum: 0.02, count: 10},
	}
	got := after.Sub(before)
	want := map[string]ServerTime{
		"POST sandboxclaims":         {Count: 10, Mean: 7 * time.Millisecond},
		"PATCH sandboxclaims/status": {Count: 10, Mean: 12 * time.Millisecond},
		"DELETE sandboxclaims":       {Count: 10, Mean: 2 * time.Millisecond},
		"etcd update sandboxclaims":  {Count: 10, Mean: 6 * time.Millisecond},
	}
	checkServerTimes(t, got, want)
	keys := got.Keys()
	wantKeys := []string{"DELETE sandboxclaims", "PATCH sandboxclaims/status", "POST sandboxclaims", "etcd update sandboxclaims"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("keys %v, want %v (etcd last)", keys, wantKeys)
	}
}

func TestReportShowsServerTimes(t *testing.T) {
	r := &Result{Scenario: Sustained, ServerTimes: ServerTimes{
		"PATCH sandboxclaims/status": {Count: 33, Mean: 11980 * time.Microsecond},
		"etcd update sandboxclaims":  {Count: 33, Mean: 7480 * time.Microsecond},
	}}
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"server time per write", "PATCH sandboxclaims/status  12.0ms (33)", "etcd update sandboxclaims   7.5ms (33)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
	r = &Result{Scenario: Sustained, ServerTimesError: "reading apiserver /metrics: forbidden"}
	buf.Reset()
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "server time per write") || !strings.Contains(buf.String(), "unavailable: reading apiserver /metrics: forbidden") {
		t.Errorf("report hides the missing server times:\n%s", buf.String())
	}
}

// conversionMetrics is a cut of a real apiserver's /metrics during a run:
// conversions into the unused v1alpha1 of two CRDs, failed calls kept
// apart, and the webhook-agnostic series that must be left out.
const conversionMetrics = `# TYPE apiserver_crd_conversion_webhook_duration_seconds histogram
apiserver_crd_conversion_webhook_duration_seconds_bucket{crd_name="sandboxes.agents.x-k8s.io",from_version="v1beta1",succeeded="true",to_version="v1alpha1",le="0.005"} 100
apiserver_crd_conversion_webhook_duration_seconds_sum{crd_name="sandboxes.agents.x-k8s.io",from_version="v1beta1",succeeded="true",to_version="v1alpha1"} 0.6
apiserver_crd_conversion_webhook_duration_seconds_count{crd_name="sandboxes.agents.x-k8s.io",from_version="v1beta1",succeeded="true",to_version="v1alpha1"} 120
apiserver_crd_conversion_webhook_duration_seconds_sum{crd_name="sandboxes.agents.x-k8s.io",from_version="v1beta1",succeeded="false",to_version="v1alpha1"} 2
apiserver_crd_conversion_webhook_duration_seconds_count{crd_name="sandboxes.agents.x-k8s.io",from_version="v1beta1",succeeded="false",to_version="v1alpha1"} 4
apiserver_crd_conversion_webhook_duration_seconds_sum{crd_name="sandboxclaims.extensions.agents.x-k8s.io",from_version="v1beta1",succeeded="true",to_version="v1alpha1"} 0.2
apiserver_crd_conversion_webhook_duration_seconds_count{crd_name="sandboxclaims.extensions.agents.x-k8s.io",from_version="v1beta1",succeeded="true",to_version="v1alpha1"} 100
apiserver_conversion_webhook_duration_seconds_sum{failure_type="",result="success"} 8
apiserver_conversion_webhook_duration_seconds_count{failure_type="",result="success"} 224
`

func TestConversionCallsAreCountedApart(t *testing.T) {
	before, err := parseDurationTotals(strings.NewReader(durationMetrics))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseDurationTotals(strings.NewReader(durationMetrics + conversionMetrics))
	if err != nil {
		t.Fatal(err)
	}
	writes, conversions := after.Sub(before).splitConversions()
	if len(writes) != 0 {
		t.Errorf("writes = %v, want none (no write happened between the scrapes)", writes)
	}
	want := map[string]ServerTime{
		"convert sandboxes v1beta1->v1alpha1":        {Count: 120, Mean: 5 * time.Millisecond},
		"convert sandboxes v1beta1->v1alpha1 failed": {Count: 4, Mean: 500 * time.Millisecond},
		"convert sandboxclaims v1beta1->v1alpha1":    {Count: 100, Mean: 2 * time.Millisecond},
	}
	checkServerTimes(t, conversions, want)
	if n := conversions.calls(); n != 224 {
		t.Errorf("calls = %v, want 224", n)
	}
	r := &Result{Claims: 32, Conversions: conversions, ConversionsPerClaim: conversions.calls() / 32}
	var out bytes.Buffer
	if err := WriteTable(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"conversion webhook calls", "7.0 per claim", "sandboxes v1beta1->v1alpha1", "5.0ms (120)"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
}

// checkServerTimes compares times key by key, means to the microsecond; a
// key without requests in the window must be left out.
func checkServerTimes(t *testing.T, got ServerTimes, want map[string]ServerTime) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if g := got[k]; g.Count != w.Count || (g.Mean-w.Mean).Abs() > time.Microsecond {
			t.Errorf("%s = %+v, want %+v", k, g, w)
		}
	}
}

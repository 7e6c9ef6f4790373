package bench

import (
	"strings"
	"testing"
)

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1beta1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="status",verb="PUT",version="v1beta1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="agents.x-k8s.io",resource="sandboxes",scope="resource",subresource="",verb="PATCH",version="v1beta1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="agents.x-k8s.io",resource="sandboxes",scope="resource",subresource="",verb="PATCH",version="v1beta1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 99
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="WATCH",version="v1"} 4
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 1.5e+01
`

func TestParseRequestTotals(t *testing.T) {
	got, err := parseRequestTotals(strings.NewReader(sampleMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := RequestCounts{
		"POST sandboxclaims": 10, "PUT sandboxclaims/status": 10, "PATCH sandboxes": 12, "POST pods": 15,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if got.Total() != 47 || got.Total("sandboxes", "sandboxclaims/status") != 22 {
		t.Errorf("totals = %v / %v", got.Total(), got.Total("sandboxes", "sandboxclaims/status"))
	}
	delta := got.Sub(RequestCounts{"POST pods": 5, "PATCH sandboxes": 12})
	if delta["POST pods"] != 10 || delta["PATCH sandboxes"] != 0 || len(delta) != 3 {
		t.Errorf("delta = %v", delta)
	}
}

func TestParseLabelsEscapes(t *testing.T) {
	got := parseLabels(`a="x",b="say \"hi\"",c=""`)
	if got["a"] != "x" || got["b"] != `say "hi"` || got["c"] != "" || len(got) != 3 {
		t.Errorf("labels = %v", got)
	}
}

package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestReports(t *testing.T) {
	t0 := time.Unix(0, 0)
	tr := NewTrace("c1", t0)
	tr.Sandbox, tr.Launch = "pool-abc", "warm"
	tr.Mark(Created, t0.Add(3*time.Millisecond))
	tr.Mark(Ready, t0.Add(12500*time.Microsecond))
	r := &Result{Scenario: Burst, Claims: 1, Ready: 1, Warm: 1, Traces: []*ClaimTrace{tr},
		Milestones: MilestoneSummaries([]*ClaimTrace{tr}), Writes: RequestCounts{"PATCH sandboxes": 1}, WritesPerClaim: 1}
	var table, js, csv bytes.Buffer
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "ready") || !strings.Contains(table.String(), "12.5ms") {
		t.Errorf("table:\n%s", table.String())
	}
	if err := WriteJSON(&js, r); err != nil || !strings.Contains(js.String(), `"p50_ns": 12500000`) {
		t.Errorf("json (%v):\n%s", err, js.String())
	}
	if err := WriteCSV(&csv, r); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv.String()), "\n")
	if len(lines) != 2 || lines[1] != "c1,pool-abc,warm,,3.000,,12.500,,," {
		t.Errorf("csv:\n%s", csv.String())
	}
}

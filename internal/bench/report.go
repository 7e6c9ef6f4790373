package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints a result for people.
func WriteTable(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\t%s\n", r.Scenario)
	fmt.Fprintf(tw, "claims\t%d (ready %d, errors %d, warm %d, cold %d)\n", r.Claims, r.Ready, r.Errors, r.Warm, r.ColdLaunches)
	fmt.Fprintf(tw, "elapsed\t%s (%.1f claims/s Ready)\n", r.Elapsed.Round(time.Millisecond), r.Throughput)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "milestone (from create call)\tn\tp50\tp90\tp99\tmax")
	for _, m := range Milestones {
		s, ok := r.Milestones[m]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", m, s.Count, fmtDur(s.P50), fmtDur(s.P90), fmtDur(s.P99), fmtDur(s.Max))
	}
	if len(r.Steps) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "step (between milestones)\tn\tp50\tp90\tp99\tmax")
		for _, k := range StepOrder(r.Steps) {
			s := r.Steps[k]
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", k, s.Count, fmtDur(s.P50), fmtDur(s.P90), fmtDur(s.P99), fmtDur(s.Max))
		}
	}
	fmt.Fprintln(tw)
	if r.Writes != nil {
		fmt.Fprintf(tw, "apiserver writes per claim\t%.2f (client %.2f, claim path %.2f, refill %.2f, teardown %.2f, events %.2f)\n",
			r.WritesPerClaim, r.ClientWrites, r.ClaimPathWrites, r.RefillWrites, r.TeardownWrites, r.EventWrites)
		for _, k := range r.Writes.Keys() {
			fmt.Fprintf(tw, "  %s\t%.0f\n", k, r.Writes[k])
		}
	} else {
		fmt.Fprintf(tw, "apiserver writes\tunavailable: %s\n", r.WritesError)
	}
	switch {
	case len(r.ServerTimes) > 0:
		fmt.Fprintln(tw, "server time per write\tmean as the apiserver measured it (n)")
		writeServerTimes(tw, r.ServerTimes, "")
	case r.ServerTimesError != "":
		fmt.Fprintf(tw, "server time per write\tunavailable: %s\n", r.ServerTimesError)
	}
	if r.ServerTimesError == "" {
		fmt.Fprintf(tw, "conversion webhook calls\t%.1f per claim (one per write for each served non-storage version)\n", r.ConversionsPerClaim)
		writeServerTimes(tw, r.Conversions, conversionKeyPrefix)
	}
	switch c := r.Calibration; {
	case c != nil:
		fmt.Fprintf(tw, "apiserver floor\tConfigMap patch p50 %s, p90 %s (%d one after another before the run)\n", fmtDur(c.WriteP50), fmtDur(c.WriteP90), c.Writes)
		if c.StealPercent >= 0 {
			fmt.Fprintf(tw, "CPU steal\t%.1f%% of this machine's CPU during the run\n", c.StealPercent)
		}
	case r.CalibrationError != "":
		fmt.Fprintf(tw, "apiserver floor\tunavailable: %s\n", r.CalibrationError)
	}
	if r.ControllerCPU > 0 || r.ControllerRSS > 0 {
		fmt.Fprintf(tw, "controller\t%.2f CPU s, peak RSS %.0f MiB\n", r.ControllerCPU, r.ControllerRSS/(1<<20))
	}
	return tw.Flush()
}

// writeServerTimes writes one indented line per key of t, in Keys order,
// the key without prefix: its mean and, in parentheses, how many.
func writeServerTimes(w io.Writer, t ServerTimes, prefix string) {
	for _, k := range t.Keys() {
		fmt.Fprintf(w, "  %s\t%s (%.0f)\n", strings.TrimPrefix(k, prefix), fmtDur(t[k].Mean), t[k].Count)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}

// WriteJSON writes the result, traces included, as JSON.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteCSV writes one row per claim: milestone offsets in milliseconds.
func WriteCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	header := append([]string{"claim", "sandbox", "launch_type", "error"}, Milestones...)
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, t := range r.Traces {
		row := []string{t.Name, t.Sandbox, t.Launch, t.Err}
		for _, m := range Milestones {
			if d, ok := t.Since(m); ok {
				row = append(row, strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64))
			} else {
				row = append(row, "")
			}
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

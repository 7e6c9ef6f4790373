package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
)

// ageRE matches kubectl-style ages: 5s, 12m, 3h4m, 2d.
var ageRE = regexp.MustCompile(`^(\d+[smhdy])+$`)

// normalizeTable replaces the AGE column of a table with <age> and
// realigns it, so golden files do not depend on how long things took.
func normalizeTable(t *testing.T, table string) string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	header := strings.Fields(strings.ReplaceAll(lines[0], "RUNTIME CLASS", "RUNTIME_CLASS"))
	ageCol, expCol := -1, -1
	for i, h := range header {
		switch h {
		case "AGE":
			ageCol = i
		case "EXPIRES":
			expCol = i
		}
	}
	if ageCol < 0 {
		t.Fatalf("no AGE column in:\n%s", table)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	for i, l := range lines {
		cols := strings.Fields(l)
		if i == 0 {
			cols = header
			cols[len(cols)-1] = strings.ReplaceAll(cols[len(cols)-1], "_", " ")
		} else {
			if len(cols) != len(header) {
				t.Fatalf("row %q has %d columns, header %d", l, len(cols), len(header))
			}
			if !ageRE.MatchString(cols[ageCol]) {
				t.Fatalf("AGE %q of row %q is not an age", cols[ageCol], l)
			}
			cols[ageCol] = "<age>"
			if expCol >= 0 && ageRE.MatchString(cols[expCol]) {
				cols[expCol] = "<expires>"
			}
		}
		_, _ = tw.Write([]byte(strings.Join(cols, "\t") + "\n")) // into a strings.Builder: cannot fail
	}
	_ = tw.Flush()
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// TestLsGolden: two claims (one suspended) and a Sandbox made straight
// from the template, listed as a table (golden), as JSON and as names.
func TestLsGolden(t *testing.T) {
	st := devstackTarget(t)
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "--wait", "golden-a", "golden-b", "golden-c") })

	r := ok(t, st, "create", "--pool", st.pool, "--name", "golden-a", "-l", "test=golden", "--wait", "-o", "json")
	var created map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created["name"] != "golden-a" ||
		created["state"] != "Running" || created["pool"] != st.pool || created["pod"] == nil {
		t.Errorf("create -o json: %v\n%s", err, r.stdout)
	}
	ok(t, st, "create", "--pool", st.pool, "--name", "golden-b", "-l", "test=golden", "--wait")
	r = ok(t, st, "create", "--template", st.template, "--name", "golden-c", "-l", "test=golden", "--wait")
	if r.stdout != "golden-c\n" || !strings.Contains(r.stderr, "Sandbox default/golden-c created") ||
		!strings.Contains(r.stderr, "(cold launch)") {
		t.Errorf("create --template:\n%s", r)
	}
	ok(t, st, "suspend", "golden-b", "--wait")

	r = ok(t, st, "ls", "-l", "test=golden")
	golden(t, "ls.golden", normalizeTable(t, r.stdout))
	r = ok(t, st, "ls", "-l", "test=golden", "-A")
	golden(t, "ls-all-namespaces.golden", normalizeTable(t, r.stdout))

	r = ok(t, st, "ls", "-l", "test=golden", "-o", "wide")
	if !strings.Contains(r.stdout, "SANDBOX") || !strings.Contains(r.stdout, "TEMPLATE") || !strings.Contains(r.stdout, st.template) {
		t.Errorf("ls -o wide:\n%s", r.stdout)
	}
	r = ok(t, st, "ls", "-l", "test=golden", "-o", "name")
	if r.stdout != "golden-a\ngolden-b\ngolden-c\n" {
		t.Errorf("ls -o name: %q", r.stdout)
	}
	r = ok(t, st, "ls", "-l", "test=golden", "-o", "json")
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Items) != 3 {
		t.Fatalf("ls -o json: %v\n%s", err, r.stdout)
	}
	a := list.Items[0]
	if a["name"] != "golden-a" || a["claim"] != "golden-a" || a["pool"] != st.pool || a["state"] != "Running" ||
		a["template"] != st.template || a["podIP"] == nil || a["sandbox"] == "golden-a" {
		t.Errorf("ls -o json item: %v", a)
	}
	r = ok(t, st, "ls", "-l", "test=golden", "-o", "yaml")
	if !strings.Contains(r.stdout, "name: golden-c") {
		t.Errorf("ls -o yaml:\n%s", r.stdout)
	}
	// Idle warm-pool members only show with --warm.
	if r := ok(t, st, "ls"); strings.Contains(r.stdout, st.pool+"-") {
		t.Errorf("ls shows warm members:\n%s", r.stdout)
	}
	if r := ok(t, st, "ls", "--warm"); !strings.Contains(r.stdout, st.pool+"-") {
		t.Errorf("ls --warm hides warm members:\n%s", r.stdout)
	}

	// A Sandbox without a claim is reached by its name (TestBareSandbox
	// has more), and suspend/resume/rm work on it.
	if r := ok(t, st, "exec", "golden-c", "--", "echo", "bare"); r.stdout != "bare\n" {
		t.Errorf("exec on a claimless sandbox: %q", r.stdout)
	}
	ok(t, st, "suspend", "golden-c", "--wait")
	ok(t, st, "resume", "golden-c", "--wait")
	ok(t, st, "rm", "golden-a", "golden-b", "golden-c", "--wait")
	if r := ok(t, st, "ls", "-l", "test=golden"); r.stdout != "No sandboxes found.\n" {
		t.Errorf("ls after rm: %q", r.stdout)
	}
}

package shlex

import (
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var cases = []struct {
	in   string
	want []string
	err  error
}{
	{in: "", want: []string{}},
	{in: "   \t\n", want: []string{}},
	{in: "echo hello", want: []string{"echo", "hello"}},
	{in: "  echo   hello  ", want: []string{"echo", "hello"}},
	{in: `echo 'a b' "c d"`, want: []string{"echo", "a b", "c d"}},
	{in: `echo ''`, want: []string{"echo", ""}},
	{in: `echo ""x`, want: []string{"echo", "x"}},
	{in: `a'b'"c"d`, want: []string{"abcd"}},
	{in: `echo \$HOME \"q\" a\ b`, want: []string{"echo", "$HOME", `"q"`, "a b"}},
	{in: `echo "a\"b\\c\$d\n"`, want: []string{"echo", `a"b\c\$d\n`}},
	{in: `echo 'a\"b'`, want: []string{"echo", `a\"b`}},
	{in: "sh -c 'echo hi && ls | wc -l'", want: []string{"sh", "-c", "echo hi && ls | wc -l"}},
	{in: "echo # not a comment", want: []string{"echo", "#", "not", "a", "comment"}},
	{in: "a\\\nb", want: []string{"a\nb"}},
	{in: "héllo wörld", want: []string{"héllo", "wörld"}},
	{in: `echo 'unterminated`, err: ErrNoClosingQuotation},
	{in: `echo "unterminated`, err: ErrNoClosingQuotation},
	{in: `echo "x\`, err: ErrNoEscapedCharacter},
	{in: `echo \`, err: ErrNoEscapedCharacter},
}

func TestSplit(t *testing.T) {
	for _, tc := range cases {
		got, err := Split(tc.in)
		if !errors.Is(err, tc.err) || (tc.err == nil && !slices.Equal(got, tc.want)) {
			t.Errorf("Split(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestSplitMatchesPython checks the table against the real shlex module when
// a python3 is around (it is in the python-runtime image and on developer
// machines; the test is skipped elsewhere).
func TestSplitMatchesPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	inputs := make([]string, 0, len(cases))
	for _, tc := range cases {
		inputs = append(inputs, tc.in)
	}
	in, _ := json.Marshal(inputs)
	script := `
import json, shlex, sys
out = []
for s in json.load(sys.stdin):
    try:
        out.append({"words": shlex.split(s)})
    except ValueError as e:
        out.append({"error": str(e)})
print(json.dumps(out))
`
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = strings.NewReader(string(in))
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var res []struct {
		Words []string `json:"words"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		got, err := Split(tc.in)
		if res[i].Error != "" {
			if err == nil || err.Error() != res[i].Error {
				t.Errorf("Split(%q) error %v, python %q", tc.in, err, res[i].Error)
			}
			continue
		}
		if err != nil || !slices.Equal(got, res[i].Words) {
			t.Errorf("Split(%q) = %q, %v; python %q", tc.in, got, err, res[i].Words)
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, tc := range cases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := Split(s)
		if err != nil {
			return
		}
		// Quoting every word with single quotes (escaping embedded ones)
		// and splitting again must give the same words back.
		var b strings.Builder
		for _, w := range words {
			b.WriteString("'" + strings.ReplaceAll(w, "'", `'\''`) + "' ")
		}
		again, err := Split(b.String())
		if err != nil || !slices.Equal(words, again) {
			t.Fatalf("round trip of %q: %q -> %q (%v)", s, words, again, err)
		}
	})
}

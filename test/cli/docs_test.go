package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// docBlock is a fenced shell block of a document.
type docBlock struct {
	info  string // "sh", "sh fails", "sh cluster", "json", ...
	lines []string
	line  int // where it starts, for messages
}

// fencedBlocks returns the fenced code blocks of a Markdown file.
func fencedBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks []docBlock
		cur    *docBlock
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &docBlock{info: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: n}
		case cur != nil && strings.TrimSpace(l) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	if cur != nil {
		t.Fatalf("%s: block at line %d is not closed", path, cur.line)
	}
	return blocks
}

// TestDocsCLI runs every command of docs/cli.md, in order, against the
// integration stack: `sh` blocks must succeed as scripts, every line of
// `sh fails` blocks must fail with the CLI's one-line error, and the
// lines of `sh cluster` blocks (they need root or a kubelet) must at
// least be valid command lines (run with --help).
func TestDocsCLI(t *testing.T) {
	st := devstackTarget(t)
	t.Cleanup(func() { cli(t, st, "", "rm", "--ignore-not-found", "my-sandbox", "scratch") })
	dir := t.TempDir()
	path := os.Getenv("PATH")
	if kubectl := filepath.Join(testenv.AssetsDir(), "kubectl"); fileExists(kubectl) {
		path = testenv.AssetsDir() + ":" + path
	}
	env := []string{"PATH=" + filepath.Dir(binary) + ":" + path, "HOME=" + dir, "KUBECONFIG=" + st.kubeconfig, "TERM=dumb"}
	run := func(script string) result {
		ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("running %q: %v", script, err)
		}
		return r
	}
	blocks := fencedBlocks(t, filepath.Join(testenv.RepoRoot(), "docs", "cli.md"))
	ran := 0
	for _, b := range blocks {
		switch b.info {
		case "sh":
			r := run(strings.Join(b.lines, "\n"))
			if r.code != 0 {
				t.Fatalf("docs/cli.md block at line %d failed:\n%s\n%s", b.line, strings.Join(b.lines, "\n"), r)
			}
		case "sh fails":
			for _, l := range b.lines {
				r := run(l)
				line := oneLineError(t, r, "agent-sandbox")
				if !strings.Contains(line, "fix:") {
					t.Errorf("docs/cli.md line %q: error without a fix: %q", l, line)
				}
			}
		case "sh cluster":
			for _, l := range b.lines {
				if r := run(l + " --help"); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
					t.Errorf("docs/cli.md line %q is not a valid command line:\n%s", l, r)
				}
			}
		default:
			t.Errorf("docs/cli.md block at line %d has info %q: use sh, sh fails or sh cluster", b.line, b.info)
			continue
		}
		ran += len(b.lines)
	}
	// Every command of the CLI is shown (and so run) in the document.
	root := ok(t, st, "--help").stdout
	list := strings.Index(root, "Available Commands:")
	if list < 0 {
		t.Fatalf("--help lists no commands:\n%s", root)
	}
	cmds := regexp.MustCompile(`(?m)^  ([a-z-]+)\s`).FindAllStringSubmatch(root[list:], -1)
	for _, m := range cmds {
		if m[1] == "help" {
			continue
		}
		if !strings.Contains(strings.Join(allLines(blocks), "\n"), "agent-sandbox "+m[1]) {
			t.Errorf("docs/cli.md runs no `agent-sandbox %s`", m[1])
		}
	}
	t.Logf("ran %d lines of docs/cli.md", ran)
}

func allLines(blocks []docBlock) []string {
	var out []string
	for _, b := range blocks {
		out = append(out, b.lines...)
	}
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestDocsMCP: the client configurations of docs/mcp.md are valid JSON
// whose command lines the CLI accepts.
func TestDocsMCP(t *testing.T) {
	blocks := fencedBlocks(t, filepath.Join(testenv.RepoRoot(), "docs", "mcp.md"))
	n := 0
	for _, b := range blocks {
		if b.info != "json" {
			continue
		}
		var cfg struct {
			MCPServers map[string]struct {
				Command string   `json:"command"`
				Args    []string `json:"args"`
				URL     string   `json:"url"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal([]byte(strings.Join(b.lines, "\n")), &cfg); err != nil {
			t.Errorf("docs/mcp.md block at line %d: %v", b.line, err)
			continue
		}
		for name, s := range cfg.MCPServers {
			n++
			if s.URL != "" {
				continue
			}
			if filepath.Base(s.Command) != "agent-sandbox" {
				t.Errorf("%s: command %q", name, s.Command)
				continue
			}
			out, err := exec.Command(binary, append(s.Args, "--help")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v is not a valid command line: %v\n%s", name, s.Args, err, out)
			}
		}
	}
	if n == 0 {
		t.Error("docs/mcp.md has no client configuration")
	}
}

// TestDocsMetrics: docs/metrics.md lists every metric the controller and
// the router define.
func TestDocsMetrics(t *testing.T) {
	root := testenv.RepoRoot()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:Name:\s*|NewDesc\()"((?:agent_sandbox|sandbox_router)\w*)"`)
	var names []string
	for _, glob := range []string{"internal/metrics/*.go", "internal/router/*.go", "internal/controller/*/*.go"} {
		files, _ := filepath.Glob(filepath.Join(root, glob))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				names = append(names, m[1])
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metrics in the sources: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
}

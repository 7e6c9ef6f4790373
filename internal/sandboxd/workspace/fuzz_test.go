package workspace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/sandboxd/internal/sandboxdtest"
)

// FuzzResolve plants a symlink with a fuzzed target inside the root, then
// resolves a fuzzed path and writes through it. Invariants: a resolved path
// is relative, clean and free of "..", its host location is inside the root,
// and nothing is ever created or changed outside the root (the
// temporary directory around it holds the targets an escape would hit).
func FuzzResolve(f *testing.F) {
	seeds := [][2]string{
		{"sub", "fz/x"},
		{"../outside", "fz/secret"},
		{"/etc", "fz/passwd"},
		{"..", "fz/fz/fz"},
		{"sub/../..", "fz/outside/secret"},
		{"fz", "fz"},
		{"missing/../../outside", "fz/new"},
		{"", "../../etc/passwd"},
		{"sub", "/abs/../../x"},
		{"./sub/./", "fz/./deep/../file.txt"},
		{"sub\x00", "a\x00b"},
		{"rel-out", "fz/secret"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	r, tmp := layout(f)
	before := sandboxdtest.Tree(f, tmp, r.Dir())
	link := filepath.Join(r.Dir(), "fz")

	f.Fuzz(func(t *testing.T, target, p string) {
		_ = os.Remove(link)
		if target != "" && !strings.ContainsRune(target, 0) {
			if err := os.Symlink(target, link); err != nil {
				t.Skip()
			}
		}
		for _, resolve := range []func(string) (string, error){r.Resolve, r.ResolveRelative} {
			rel, err := resolve(p)
			if err != nil {
				continue
			}
			if rel != "." && (strings.HasPrefix(rel, "/") || rel != filepath.Clean(rel) ||
				rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(rel, "/../")) {
				t.Fatalf("resolve(%q) = %q: not a clean relative path", p, rel)
			}
			host := r.Abs(rel)
			if real, err := evalExisting(host); err == nil {
				if real != r.Dir() && !strings.HasPrefix(real, r.Dir()+"/") {
					t.Fatalf("resolve(%q) = %q leads to %q outside %q", p, rel, real, r.Dir())
				}
			}
			// Writing through os.Root may fail (e.g. a file in the way),
			// but must never land outside.
			if _, err := r.WriteFile(rel, 0o644, strings.NewReader("fuzz")); err == nil {
				_ = r.Remove(rel, false)
			}
		}
		if after := sandboxdtest.Tree(t, tmp, r.Dir()); after != before {
			t.Fatalf("outside tree changed: %q -> %q", before, after)
		}
	})
}

// evalExisting resolves the longest existing prefix of p.
func evalExisting(p string) (string, error) {
	rest := ""
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrInvalid) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

package remote

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMapEntry(t *testing.T) {
	for _, tc := range []struct {
		entry, top, rename, want string
		ok                       bool
	}{
		{"./data", "data", "", "data", true},
		{"./data/x/y", "data", "", "data/x/y", true},
		{"./data/x", "data", "out", "out/x", true},
		{"./data", "data", "out", "out", true},
		{"./other", "data", "", "", false},
		{"./data2/x", "data", "", "", false},
		{"./data/../../x", "data", "", "", false},
		{"/etc/passwd", "data", "", "", false},
		{"../x", ".", "", "", false},
		{"./a/b", ".", ".", "a/b", true},
		{"./a/b", ".", "dest", "dest/a/b", true},
	} {
		got, ok := mapEntry(tc.entry, tc.top, tc.rename)
		if got != tc.want || ok != tc.ok {
			t.Errorf("mapEntry(%q, %q, %q) = %q, %v; want %q, %v", tc.entry, tc.top, tc.rename, got, ok, tc.want, tc.ok)
		}
	}
}

// archive builds a tar stream of entries (a trailing / is a directory,
// "->" a symlink).
func archive(t *testing.T, entries ...string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		name, link, isLink := strings.Cut(e, "->")
		hdr := &tar.Header{Name: name, Mode: 0o644}
		switch {
		case isLink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, link
		case strings.HasSuffix(name, "/"):
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(name))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func TestExtractTar(t *testing.T) {
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	err = extractTar(archive(t, "./d/", "./d/a.txt", "./d/sub/b.txt", "./d/link->a.txt"), r, "d", "copy")
	if err != nil {
		t.Fatalf("extract: %v", err)
	}
	for p, want := range map[string]string{"copy/a.txt": "./d/a.txt", "copy/sub/b.txt": "./d/sub/b.txt", "copy/link": "./d/a.txt"} {
		if got, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", p, got, err)
		}
	}
}

// A hostile sandbox may send entries that climb out, or a symlink out of
// the destination followed by a file through it: both are refused and
// nothing is written outside.
func TestExtractTarRefusesEscapes(t *testing.T) {
	for name, entries := range map[string][]string{
		"dotdot":          {"./d/", "./d/../../escaped.txt"},
		"absolute":        {"/tmp/escaped.txt"},
		"through symlink": {"./d/", "./d/up->../..", "./d/up/escaped.txt"},
		"absolute link":   {"./d/", "./d/up->/", "./d/up/escaped.txt"},
	} {
		t.Run(name, func(t *testing.T) {
			outer := t.TempDir()
			dir := filepath.Join(outer, "a", "b")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			r, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Close() }()
			if err := extractTar(archive(t, entries...), r, "d", ""); err == nil {
				t.Errorf("extract succeeded")
			}
			for _, p := range []string{filepath.Join(outer, "escaped.txt"), filepath.Join(outer, "a", "escaped.txt"), "/escaped.txt"} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

func TestCleanWorkspacePath(t *testing.T) {
	for in, want := range map[string]string{
		"a.txt": "a.txt", "/a/b": "a/b", "a//b/": "a/b", ".": ".", "/": ".", "./x": "x",
	} {
		if got, err := CleanWorkspacePath(in); err != nil || got != want {
			t.Errorf("CleanWorkspacePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "../x", "a/../../x", "a/..", "x\x00"} {
		if _, err := CleanWorkspacePath(in); err == nil {
			t.Errorf("CleanWorkspacePath(%q) accepted", in)
		}
	}
}

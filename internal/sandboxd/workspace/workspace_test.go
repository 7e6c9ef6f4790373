package workspace

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// layout builds <tmp>/workspace (the root) next to <tmp>/outside and
// <tmp>/workspace-evil, with a few in-root and escaping symlinks.
func layout(t testing.TB) (*Root, string) {
	t.Helper()
	tmp := t.TempDir()
	ws := filepath.Join(tmp, "workspace")
	must(t, os.MkdirAll(filepath.Join(ws, "sub", "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "sub", "file.txt"), []byte("inside"), 0o644))
	must(t, os.MkdirAll(filepath.Join(tmp, "outside"), 0o755))
	must(t, os.WriteFile(filepath.Join(tmp, "outside", "secret"), []byte("secret"), 0o600))
	must(t, os.MkdirAll(filepath.Join(tmp, "workspace-evil"), 0o755))
	must(t, os.Symlink("../outside", filepath.Join(ws, "rel-out")))
	must(t, os.Symlink(filepath.Join(tmp, "outside"), filepath.Join(ws, "abs-out")))
	must(t, os.Symlink(filepath.Join(tmp, "outside", "secret"), filepath.Join(ws, "secret-link")))
	must(t, os.Symlink("sub/file.txt", filepath.Join(ws, "in-link")))
	must(t, os.Symlink(filepath.Join(ws, "sub"), filepath.Join(ws, "abs-in")))
	must(t, os.Symlink("in-link", filepath.Join(ws, "chain")))
	must(t, os.Symlink("loop-b", filepath.Join(ws, "loop-a")))
	must(t, os.Symlink("loop-a", filepath.Join(ws, "loop-b")))
	must(t, os.Symlink("sub/deep/../../..", filepath.Join(ws, "sneaky")))
	must(t, os.Symlink("missing/../../outside", filepath.Join(ws, "lexical-out")))
	r, err := Open(ws)
	must(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r, tmp
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	r, tmp := layout(t)
	root := r.Dir()
	cases := []struct {
		in   string
		want string
		err  error
	}{
		{in: "sub/file.txt", want: "sub/file.txt"},
		{in: "", want: "."},
		{in: ".", want: "."},
		{in: "/", want: "."},
		{in: "//", want: "."},
		{in: root, want: "."},
		{in: root + "/", want: "."},
		{in: root + "/sub/file.txt", want: "sub/file.txt"},
		{in: "/etc/passwd", want: "etc/passwd"},
		{in: "sub/./deep/../file.txt", want: "sub/file.txt"},
		{in: "sub//deep/", want: "sub/deep"},
		{in: "new/nested/file", want: "new/nested/file"},
		{in: "in-link", want: "sub/file.txt"},
		{in: "chain", want: "sub/file.txt"},
		{in: "abs-in/file.txt", want: "sub/file.txt"},
		{in: "sub/file.txt/below", want: "sub/file.txt/below"},
		// "/workspace-evil" is a sibling of the root on the host, but a
		// user path is re-rooted, so it names a file inside.
		{in: filepath.Join(tmp, "workspace-evil"), want: strings.TrimPrefix(filepath.Join(tmp, "workspace-evil"), "/")},
		{in: "..", err: ErrEscape},
		{in: "../", err: ErrEscape},
		{in: "../workspace-evil", err: ErrEscape},
		{in: "../outside/secret", err: ErrEscape},
		{in: "sub/../../outside", err: ErrEscape},
		{in: "a/b/../../../x", err: ErrEscape},
		{in: "/../etc/passwd", err: ErrEscape},
		{in: root + "/../outside", err: ErrEscape},
		{in: "rel-out", err: ErrEscape},
		{in: "rel-out/secret", err: ErrEscape},
		{in: "rel-out/new-file", err: ErrEscape},
		{in: "rel-out/new/nested/file", err: ErrEscape},
		{in: "abs-out/secret", err: ErrEscape},
		{in: "secret-link", err: ErrEscape},
		{in: "sneaky", err: ErrEscape},
		{in: "sneaky/outside/secret", err: ErrEscape},
		{in: "lexical-out/secret", err: ErrEscape},
		{in: "loop-a", err: ErrInvalidPath},
		{in: "sub/\x00/x", err: ErrInvalidPath},
	}
	for _, tc := range cases {
		got, err := r.Resolve(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("Resolve(%q) = %q, %v; want error %v", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestResolveRelative(t *testing.T) {
	r, _ := layout(t)
	for in, want := range map[string]string{
		"/sub/file.txt":         "sub/file.txt",
		"///sub":                "sub",
		r.Dir() + "/x":          strings.TrimPrefix(r.Dir(), "/") + "/x",
		"relative/path.txt":     "relative/path.txt",
		"in-link":               "sub/file.txt",
		"sub/deep/../file.txt":  "sub/file.txt",
		"":                      ".",
		"./sub/deep/../../sub/": "sub",
	} {
		got, err := r.ResolveRelative(in)
		if err != nil || got != want {
			t.Errorf("ResolveRelative(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"../x", "/../x", "rel-out/secret", "a\x00b"} {
		if got, err := r.ResolveRelative(in); err == nil {
			t.Errorf("ResolveRelative(%q) = %q, want error", in, got)
		}
	}
}

// A root configured through a symlink resolves paths lexically under the
// resolved directory and strips either spelling of the root prefix.
func TestResolveSymlinkedRoot(t *testing.T) {
	tmp := t.TempDir()
	real := filepath.Join(tmp, "real")
	must(t, os.MkdirAll(real, 0o755))
	link := filepath.Join(tmp, "link")
	must(t, os.Symlink(real, link))
	must(t, os.Symlink(filepath.Join(link, "target"), filepath.Join(real, "via-configured")))
	r, err := Open(link)
	must(t, err)
	defer r.Close()
	if r.Dir() != real {
		t.Fatalf("Dir() = %q, want %q", r.Dir(), real)
	}
	for in, want := range map[string]string{
		"does/not/exist":     "does/not/exist",
		link + "/a/b":        "a/b",
		real + "/a/b":        "a/b",
		"via-configured/x":   "target/x",
		link:                 ".",
		"/" + link + "/../x": strings.TrimPrefix(tmp, "/") + "/x",
	} {
		got, err := r.Resolve(in)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestOpenCreatesRoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	r, err := Open(dir)
	must(t, err)
	defer r.Close()
	fi, err := os.Stat(dir)
	must(t, err)
	if !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("root mode = %v", fi.Mode())
	}
	if _, err := Open("  "); err == nil {
		t.Fatal("Open of a blank root succeeded")
	}
}

func TestWriteFile(t *testing.T) {
	r, _ := layout(t)
	n, err := r.WriteFile("x/y/z.txt", 0o755, strings.NewReader("hello"))
	if err != nil || n != 5 {
		t.Fatalf("WriteFile = %d, %v", n, err)
	}
	fi, err := os.Stat(filepath.Join(r.Dir(), "x", "y", "z.txt"))
	must(t, err)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode = %v, want 0755", fi.Mode().Perm())
	}
	if pfi, _ := os.Stat(filepath.Join(r.Dir(), "x")); pfi.Mode().Perm() != 0o755 {
		t.Errorf("parent mode = %v", pfi.Mode().Perm())
	}
	// Overwrite replaces the content.
	_, err = r.WriteFile("x/y/z.txt", 0o600, strings.NewReader("second"))
	must(t, err)
	b, _ := os.ReadFile(filepath.Join(r.Dir(), "x", "y", "z.txt"))
	if string(b) != "second" {
		t.Errorf("content = %q", b)
	}
	if _, err := r.WriteFile("sub", 0o644, strings.NewReader("")); !errors.Is(err, ErrIsDir) {
		t.Errorf("write to dir: %v", err)
	}
	if _, err := r.WriteFile(".", 0o644, strings.NewReader("")); !errors.Is(err, ErrIsDir) {
		t.Errorf("write to root: %v", err)
	}
	if _, err := r.WriteFile("sub/file.txt/child", 0o644, strings.NewReader("")); err == nil {
		t.Error("write below a file succeeded")
	}
}

// A failing source (a client that disconnects mid-upload) leaves the old
// file untouched and no temporary file behind.
func TestWriteFileFailureCleansUp(t *testing.T) {
	r, _ := layout(t)
	_, err := r.WriteFile("sub/file.txt", 0o644, iotest.TimeoutReader(bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20))))
	if err == nil {
		t.Fatal("WriteFile with a failing reader succeeded")
	}
	b, _ := os.ReadFile(filepath.Join(r.Dir(), "sub", "file.txt"))
	if string(b) != "inside" {
		t.Errorf("content after failed write = %q", b)
	}
	ents, _ := os.ReadDir(filepath.Join(r.Dir(), "sub"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), TempPrefix) {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

func TestRemove(t *testing.T) {
	r, _ := layout(t)
	must(t, r.Remove("sub/file.txt", false))
	if _, err := r.Lstat("sub/file.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	if err := r.Remove("sub/file.txt", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("second remove: %v", err)
	}
	_, err := r.WriteFile("d/f", 0o644, strings.NewReader("x"))
	must(t, err)
	if err := r.Remove("d", false); !errors.Is(err, ErrNotEmpty) {
		t.Errorf("remove non-empty dir: %v", err)
	}
	must(t, r.Remove("d", true))
	if err := r.Remove(".", false); !errors.Is(err, ErrRootDelete) {
		t.Errorf("remove root: %v", err)
	}
	must(t, r.Remove(".", true))
	ents, err := os.ReadDir(r.Dir())
	must(t, err)
	if len(ents) != 0 {
		t.Errorf("root not emptied: %v", ents)
	}
}

func TestReadDirOmitsEscapingAndBrokenLinks(t *testing.T) {
	r, _ := layout(t)
	must(t, os.Symlink("nowhere", filepath.Join(r.Dir(), "broken")))
	ents, err := r.ReadDir(".")
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	want := []string{"abs-in", "chain", "in-link", "sub"}
	if !slices.Equal(names, want) {
		t.Fatalf("names = %v, want %v", names, want)
	}
	for _, e := range ents {
		if e.Name == "in-link" && (e.Info.IsDir() || e.Info.Size() != int64(len("inside"))) {
			t.Errorf("in-link described as %v size %d, want the target file", e.Info.Mode(), e.Info.Size())
		}
		if e.Name == "abs-in" && !e.Info.IsDir() {
			t.Errorf("abs-in not described as a directory")
		}
	}
}

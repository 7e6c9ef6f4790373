// Package workspace confines sandboxd's file access to one directory tree.
//
// A user path is first mapped to a root-relative path that contains no
// symlinks and no ".." (Resolve), so that escapes are reported precisely as
// ErrEscape. Every file operation then goes through an os.Root opened on the
// workspace directory: even if a component is swapped for an escaping
// symlink between resolution and use, the kernel-level openat walk of
// os.Root refuses to leave the tree. Nothing outside the root is ever read
// or written.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

var (
	// ErrEscape reports a path that leaves the workspace root, lexically or
	// through a symlink.
	ErrEscape = errors.New("path traversal outside sandbox root is forbidden")
	// ErrInvalidPath reports a path that cannot name a file, e.g. one that
	// contains a NUL byte or a symlink loop.
	ErrInvalidPath = errors.New("invalid path")
	// ErrIsDir reports a write whose target is an existing directory.
	ErrIsDir = errors.New("target path is a directory")
	// ErrNotEmpty reports a non-recursive delete of a non-empty directory.
	ErrNotEmpty = errors.New("directory is not empty; pass recursive=true to remove it")
	// ErrRootDelete reports a non-recursive delete of the root itself.
	ErrRootDelete = errors.New("cannot delete the sandbox root; pass recursive=true to clear its contents")
)

// maxSymlinks bounds symlink expansion like the kernel's MAXSYMLINKS.
const maxSymlinks = 40

// Root is an open workspace directory. It is safe for concurrent use.
type Root struct {
	dir        string // absolute, symlink-resolved
	configured string // absolute, as configured (may contain symlinks)
	root       *os.Root
}

// Open creates dir (0755) when missing and opens it as a workspace root.
func Open(dir string) (*Root, error) {
	if strings.TrimSpace(dir) == "" {
		return nil, errors.New("workspace root directory is required")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("absolute path of workspace root %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create workspace root %q: %w", abs, err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("resolve workspace root %q: %w", abs, err)
	}
	r, err := os.OpenRoot(resolved)
	if err != nil {
		return nil, fmt.Errorf("open workspace root %q: %w", resolved, err)
	}
	return &Root{dir: resolved, configured: abs, root: r}, nil
}

// Close releases the root directory handle.
func (r *Root) Close() error { return r.root.Close() }

// Dir returns the absolute, symlink-resolved root directory.
func (r *Root) Dir() string { return r.dir }

// FS returns the os.Root that confines all operations.
func (r *Root) FS() *os.Root { return r.root }

// Abs returns the host path of a resolved root-relative path. It is meant
// for exec's working directory, which cannot take an os.Root.
func (r *Root) Abs(rel string) string { return filepath.Join(r.dir, filepath.FromSlash(rel)) }

// Resolve maps a path given by a sandboxd client to a resolved root-relative
// path ("." for the root). Absolute paths are re-rooted: a path that starts
// with the root directory itself has that prefix removed, any other leading
// slashes are dropped, so "/workspace-evil" names "<root>/workspace-evil".
func (r *Root) Resolve(p string) (string, error) {
	if err := checkBytes(p); err != nil {
		return "", err
	}
	for _, prefix := range []string{r.dir, r.configured} {
		if p == prefix {
			return ".", nil
		}
		if rest, ok := strings.CutPrefix(p, prefix+"/"); ok {
			p = rest
			break
		}
	}
	return r.resolve(strings.TrimLeft(p, "/"))
}

// ResolveRelative maps a path of the legacy runtime API: leading slashes
// are dropped and the rest is taken relative to the root, whatever it says.
func (r *Root) ResolveRelative(p string) (string, error) {
	if err := checkBytes(p); err != nil {
		return "", err
	}
	return r.resolve(strings.TrimLeft(p, "/"))
}

// Join resolves name inside an already resolved directory, following a
// symlink named by name. It is used for directory listings.
func (r *Root) Join(dir, name string) (string, error) {
	if strings.Contains(name, "/") || name == ".." || name == "." || name == "" {
		return "", fmt.Errorf("%w: bad entry name %q", ErrInvalidPath, name)
	}
	return r.resolve(path.Join(dir, name))
}

func checkBytes(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: path contains a NUL byte", ErrInvalidPath)
	}
	return nil
}

// resolve cleans rel lexically, refuses ".." above the root, then expands
// symlinks component by component. Missing components are kept lexically,
// so a path to a file that does not exist yet resolves under the root.
func (r *Root) resolve(rel string) (string, error) {
	rel = path.Clean("./" + rel)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", ErrEscape
	}
	if rel == "." {
		return ".", nil
	}
	pending := strings.Split(rel, "/")
	done := make([]string, 0, len(pending))
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", ErrEscape
			}
			done = done[:len(done)-1]
			continue
		}
		cur := strings.Join(append(done, c), "/")
		fi, err := r.root.Lstat(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				done = append(done, c)
				continue
			}
			if errors.Is(err, syscall.ENAMETOOLONG) {
				return "", fmt.Errorf("%w: name too long", ErrInvalidPath)
			}
			return "", fmt.Errorf("resolve %q: %w", cur, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("%w: too many levels of symbolic links", ErrInvalidPath)
		}
		target, err := r.root.Readlink(cur)
		if err != nil {
			return "", fmt.Errorf("read symlink %q: %w", cur, err)
		}
		if target == "" {
			return "", fmt.Errorf("%w: empty symlink %q", ErrInvalidPath, cur)
		}
		if path.IsAbs(target) {
			// An absolute target is a host path; it stays inside only if
			// it points at or below the root directory.
			rest, ok := r.stripRoot(path.Clean(target))
			if !ok {
				return "", ErrEscape
			}
			done = done[:0]
			target = rest
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return strings.Join(done, "/"), nil
}

// stripRoot returns the part of the clean absolute host path p below the
// root, and whether p is inside it.
func (r *Root) stripRoot(p string) (string, bool) {
	for _, prefix := range []string{r.dir, r.configured} {
		if p == prefix {
			return ".", true
		}
		if rest, ok := strings.CutPrefix(p, prefix+"/"); ok {
			return rest, true
		}
	}
	return "", false
}

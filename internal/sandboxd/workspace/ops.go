package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
)

// TempPrefix starts the name of every temporary file of an atomic write.
const TempPrefix = ".sandboxd-tmp-"

// Stat reports on a resolved path (Resolve left no symlink to follow).
func (r *Root) Stat(rel string) (fs.FileInfo, error) { return r.root.Stat(rel) }

// Lstat reports on rel without following a final symlink.
func (r *Root) Lstat(rel string) (fs.FileInfo, error) { return r.root.Lstat(rel) }

// Open opens a resolved path for reading.
func (r *Root) Open(rel string) (*os.File, error) { return r.root.Open(rel) }

// WriteFile atomically replaces the resolved path rel with the bytes of src:
// missing parents are created (0755), data goes to a temporary file in the
// same directory that is chmod-ed, fsync-ed and renamed over the target, so
// readers see the old or the new content, never a mix. The temporary file is
// removed on any failure, including a src error from a client disconnect.
func (r *Root) WriteFile(rel string, perm fs.FileMode, src io.Reader) (int64, error) {
	if rel == "." {
		return 0, ErrIsDir
	}
	if fi, err := r.root.Stat(rel); err == nil && fi.IsDir() {
		return 0, ErrIsDir
	}
	dir := path.Dir(rel)
	if dir != "." {
		if err := r.root.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("create parent directory %q: %w", dir, err)
		}
	}
	f, tmp, err := r.createTemp(dir)
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = r.root.Remove(tmp)
		}
	}()
	// Chmod on the descriptor sets the exact mode regardless of umask.
	if err := f.Chmod(perm.Perm()); err != nil {
		return 0, fmt.Errorf("chmod %q: %w", tmp, err)
	}
	n, err := io.Copy(f, src)
	if err != nil {
		return n, fmt.Errorf("write %q: %w", rel, err)
	}
	if err := f.Sync(); err != nil {
		return n, fmt.Errorf("fsync %q: %w", rel, err)
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("close %q: %w", rel, err)
	}
	if err := r.root.Rename(tmp, rel); err != nil {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return n, ErrIsDir
		}
		return n, fmt.Errorf("rename into %q: %w", rel, err)
	}
	ok = true
	return n, nil
}

func (r *Root) createTemp(dir string) (*os.File, string, error) {
	for range 10 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := path.Join(dir, TempPrefix+hex.EncodeToString(b[:]))
		f, err := r.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", fmt.Errorf("create temporary file in %q: %w", dir, err)
		}
	}
	return nil, "", fmt.Errorf("create temporary file in %q: too many collisions", dir)
}

// Remove deletes the resolved path rel. A non-empty directory needs
// recursive; the root itself is never removed, recursive only empties it.
func (r *Root) Remove(rel string, recursive bool) error {
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		if !recursive {
			return ErrRootDelete
		}
		return r.clearRoot()
	}
	if fi.IsDir() && recursive {
		if err := r.root.RemoveAll(rel); err != nil {
			return fmt.Errorf("remove %q recursively: %w", rel, err)
		}
		return nil
	}
	if err := r.root.Remove(rel); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return ErrNotEmpty
		}
		return fmt.Errorf("remove %q: %w", rel, err)
	}
	return nil
}

func (r *Root) clearRoot() error {
	d, err := r.root.Open(".")
	if err != nil {
		return fmt.Errorf("open root: %w", err)
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return fmt.Errorf("read root: %w", err)
	}
	for _, n := range names {
		if err := r.root.RemoveAll(n); err != nil {
			return fmt.Errorf("remove %q: %w", n, err)
		}
	}
	return nil
}

// DirEntry is one listed name with the metadata of what it leads to.
type DirEntry struct {
	Name string
	// Info describes the entry, or the target of a symlink entry.
	Info fs.FileInfo
}

// ReadDir lists the resolved directory rel in directory order. Symlink
// entries are resolved like any user path and described by their target;
// ones that escape the root or are broken are left out, so a listing never
// reveals anything outside the workspace.
func (r *Root) ReadDir(rel string) ([]DirEntry, error) {
	d, err := r.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Close() }()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("read directory %q: %w", rel, err)
	}
	out := make([]DirEntry, 0, len(ents))
	for _, e := range ents {
		var fi fs.FileInfo
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := r.Join(rel, e.Name())
			if err != nil {
				continue
			}
			if fi, err = r.root.Stat(target); err != nil {
				continue
			}
		} else if fi, err = e.Info(); err != nil {
			// Removed while listing.
			continue
		}
		out = append(out, DirEntry{Name: e.Name(), Info: fi})
	}
	return out, nil
}

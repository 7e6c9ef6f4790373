package images

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fileLayer is a gzip-compressed layer in a temporary file whose digests
// were computed while writing it, so that neither the image assembly nor
// the archive writer has to compress or hash it again.
type fileLayer struct {
	path   string
	desc   string
	digest v1.Hash // of the compressed bytes
	diffID v1.Hash // of the uncompressed tar
	size   int64
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

// layer wraps l as a v1.Layer; the DiffID method above spares the wrapper
// from decompressing the file to compute it.
func (l *fileLayer) layer() (v1.Layer, error) { return partial.CompressedToLayer(l) }

func (l *fileLayer) remove() { _ = os.Remove(l.path) }

func hashOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

// hashing returns a writer that writes to w and to the returned hash.
func hashing(w io.Writer) (io.Writer, hash.Hash) {
	h := sha256.New()
	return io.MultiWriter(w, h), h
}

// countingWriter counts bytes.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeLayer runs fill on a tar writer whose output is gzip-compressed
// into a temporary file in dir, hashing both streams on the way.
func writeLayer(dir, desc string, fill func(*tar.Writer) error) (*fileLayer, error) {
	f, err := os.CreateTemp(dir, ".layer-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("create layer file: %w", err)
	}
	l := &fileLayer{path: f.Name(), desc: desc}
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			l.remove()
		}
	}()
	cw := &countingWriter{w: f}
	compressed, ch := hashing(cw)
	// BestSpeed: these archives are imported locally, where time matters
	// more than bytes. A zero gzip header (no name, no mtime) keeps the
	// output reproducible.
	gz, err := gzip.NewWriterLevel(compressed, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	uncompressed, uh := hashing(gz)
	tw := tar.NewWriter(uncompressed)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("finish tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return nil, fmt.Errorf("finish gzip: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close layer file: %w", err)
	}
	l.digest, l.diffID, l.size = hashOf(ch), hashOf(uh), cw.n
	ok = true
	return l, nil
}

// cleanImagePath turns an absolute image path into a tar entry name.
func cleanImagePath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("image path %q must be absolute", p)
	}
	c := strings.TrimPrefix(path.Clean(p), "/")
	if c == "" {
		return "", fmt.Errorf("image path %q names the root", p)
	}
	return c, nil
}

// entry is one planned tar entry of the files layer.
type entry struct {
	hdr     tar.Header
	content []byte
	source  string
}

// filesLayer writes the Dirs, Files and Symlinks of spec, sorted by path,
// with missing parents added.
func filesLayer(dir string, spec Spec) (*fileLayer, error) {
	entries := map[string]*entry{}
	add := func(name string, e *entry) error {
		if _, dup := entries[name]; dup {
			return fmt.Errorf("%q is listed twice", "/"+name)
		}
		e.hdr.Name = name
		e.hdr.ModTime = Epoch
		entries[name] = e
		return nil
	}
	for _, d := range spec.Dirs {
		name, err := cleanImagePath(d.Path)
		if err != nil {
			return nil, err
		}
		mode := d.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := add(name, &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Mode: tarMode(mode), Uid: d.UID, Gid: d.GID}}); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		name, err := cleanImagePath(f.Path)
		if err != nil {
			return nil, err
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		e := &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Mode: tarMode(mode), Uid: f.UID, Gid: f.GID}}
		if f.Source != "" {
			fi, err := os.Stat(f.Source)
			if err != nil {
				return nil, fmt.Errorf("source of %s: %w", f.Path, err)
			}
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("source of %s (%s) is not a regular file", f.Path, f.Source)
			}
			e.source, e.hdr.Size = f.Source, fi.Size()
		} else {
			e.content, e.hdr.Size = f.Content, int64(len(f.Content))
		}
		if err := add(name, e); err != nil {
			return nil, err
		}
	}
	for _, s := range spec.Symlinks {
		name, err := cleanImagePath(s.Path)
		if err != nil {
			return nil, err
		}
		if s.Target == "" {
			return nil, fmt.Errorf("symlink %s has no target", s.Path)
		}
		if err := add(name, &entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Linkname: s.Target, Mode: 0o777}}); err != nil {
			return nil, err
		}
	}
	for name := range entries {
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if e, ok := entries[p]; ok {
				if e.hdr.Typeflag != tar.TypeDir {
					return nil, fmt.Errorf("/%s is both a parent directory and a %c entry", p, e.hdr.Typeflag)
				}
				continue
			}
			entries[p] = &entry{hdr: tar.Header{Name: p, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch}}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range entries {
			if !yield(n) {
				return
			}
		}
	})
	return writeLayer(dir, "files", func(tw *tar.Writer) error {
		for _, n := range names {
			e := entries[n]
			hdr := e.hdr
			if hdr.Typeflag == tar.TypeDir {
				hdr.Name += "/"
			}
			if err := tw.WriteHeader(&hdr); err != nil {
				return fmt.Errorf("tar header of /%s: %w", n, err)
			}
			if hdr.Typeflag != tar.TypeReg {
				continue
			}
			if err := writeContent(tw, e); err != nil {
				return fmt.Errorf("content of /%s: %w", n, err)
			}
		}
		return nil
	})
}

func writeContent(tw *tar.Writer, e *entry) error {
	if e.source == "" {
		_, err := tw.Write(e.content)
		return err
	}
	f, err := os.Open(e.source)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	n, err := io.Copy(tw, f)
	if err == nil && n != e.hdr.Size {
		err = fmt.Errorf("%s changed size while packing", e.source)
	}
	return err
}

// tarMode converts permission and special bits to tar's mode field.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// rootfsLayer packs a host directory. The walk is lexical, so the order is
// stable; names, owners, modes and mtimes (to the second) come from the
// files; a second path of a hard-linked inode becomes a hard-link entry.
func rootfsLayer(dir, root string) (*fileLayer, error) {
	// WalkDir does not follow a symlink at the top.
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", root)
	}
	type inode struct{ dev, ino uint64 }
	return writeLayer(dir, "rootfs "+filepath.Base(root), func(tw *tar.Writer) error {
		links := map[inode]string{}
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil || rel == "." {
				return err
			}
			name := filepath.ToSlash(rel)
			info, err := d.Info()
			if err != nil {
				return err
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok {
				return errors.New("no stat data")
			}
			hdr := tar.Header{
				Name:    name,
				Mode:    tarMode(info.Mode()),
				Uid:     int(st.Uid),
				Gid:     int(st.Gid),
				ModTime: info.ModTime().Truncate(1e9).UTC(),
			}
			switch t := info.Mode().Type(); {
			case t == fs.ModeDir:
				hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			case t == fs.ModeSymlink:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			case t.IsRegular():
				key := inode{uint64(st.Dev), st.Ino} //nolint:unconvert // Stat_t.Dev is uint32 on some GOARCHes (e.g. mips)
				if first, seen := links[key]; seen && st.Nlink > 1 {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					break
				}
				if st.Nlink > 1 {
					links[key] = name
				}
				hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			default:
				// Device nodes, FIFOs and sockets: the runtime provides
				// /dev, and the rest has no place in an image.
				return nil
			}
			if err := tw.WriteHeader(&hdr); err != nil {
				return fmt.Errorf("tar header of %s: %w", name, err)
			}
			if hdr.Typeflag == tar.TypeReg {
				if err := writeContent(tw, &entry{hdr: hdr, source: p}); err != nil {
					return fmt.Errorf("content of %s: %w", name, err)
				}
			}
			return nil
		})
	})
}

package remote

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/capbuf"
)

// Starter starts processes in a sandbox; *sandbox.Sandbox implements it.
type Starter interface {
	Start(ctx context.Context, argv []string, opts *sandbox.ProcessOptions) (*sandbox.Process, error)
}

// maxStderr bounds the stderr kept from helper commands for error
// messages.
const maxStderr = 4 << 10

// Run runs argv to completion through the process API, feeding it stdin
// (nil: EOF at once) and streaming its output to stdout and stderr (nil
// discards). It returns the exit code (-1 when killed by a signal).
func Run(ctx context.Context, s Starter, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	p, err := s.Start(ctx, argv, &sandbox.ProcessOptions{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return -1, err
	}
	var (
		wg      sync.WaitGroup
		copyErr error
	)
	wg.Go(func() {
		in := p.Stdin()
		if stdin != nil {
			// One WriteStdin call per 64 KiB rather than per Read.
			bw := bufio.NewWriterSize(in, 64<<10)
			_, err := io.Copy(bw, stdin)
			if err == nil {
				err = bw.Flush()
			}
			if err != nil {
				copyErr = err
				// Whatever the process does now, it will not get its
				// whole input: stop it rather than let it wait.
				p.Kill()
				return
			}
		}
		_ = in.Close()
	})
	code, err := p.Wait()
	wg.Wait()
	if err != nil {
		return code, err
	}
	if copyErr != nil && code == 0 {
		return code, fmt.Errorf("sending input: %w", copyErr)
	}
	return code, nil
}

// commandError is a helper command that exited non-zero.
func commandError(what string, code int, stderr *capbuf.Buffer) error {
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", code)
	}
	msg = strings.Join(strings.Fields(msg), " ")
	return fmt.Errorf("%s: %s", what, msg)
}

// uploadScript extracts a tar stream from stdin at $1 like cp -r: into $1
// when it is a directory (or ends in /, which makes it one), else as $1
// itself, renaming the archive's single top entry $2. It needs sh, tar,
// mkdir, mktemp and mv in the sandbox, as kubectl cp needs tar.
const uploadScript = `set -e
dest=$1; name=$2
case "$dest" in */) mkdir -p -- "$dest";; esac
if [ -d "$dest" ]; then exec tar -x -o -f - -C "$dest"; fi
parent=$(dirname -- "$dest")
mkdir -p -- "$parent"
tmp=$(mktemp -d "$parent/.agent-sandbox-cp.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
tar -x -o -f - -C "$tmp"
mv -f -- "$tmp/$name" "$dest"
`

// Upload copies the local file or directory src to dest in the sandbox
// (relative paths are relative to the sandbox's workspace), as a tar
// stream through the process API. Symlinks are copied as symlinks;
// devices, sockets and pipes are skipped.
func Upload(ctx context.Context, s Starter, src, dest string) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", src, err)
	}
	name := filepath.Base(filepath.Clean(src))
	if name == "/" || name == "." || name == ".." {
		if !info.IsDir() {
			return fmt.Errorf("cannot name the copy of %s", src)
		}
		abs, err := filepath.Abs(src)
		if err != nil {
			return fmt.Errorf("resolving %s: %w", src, err)
		}
		name = filepath.Base(abs)
		if name == "/" {
			name = "root"
		}
	}
	if dest == "" {
		dest = "."
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src, name)) }()
	defer func() { _ = pr.Close() }()
	stderr := capbuf.New(maxStderr)
	code, err := Run(ctx, s, []string{"/bin/sh", "-c", uploadScript, "sh", dest, name}, pr, nil, stderr)
	if err != nil {
		return fmt.Errorf("copying %s into the sandbox: %w", src, err)
	}
	if code != 0 {
		return commandError("copying "+src+" into the sandbox", code, stderr)
	}
	return nil
}

// writeTar writes src (file or directory tree) to w with entry names
// rooted at name.
func writeTar(w io.Writer, src, name string) error {
	tw := tar.NewWriter(w)
	root := filepath.Clean(src)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(p)
		if p == root {
			// The top is what src points to, like cp -r.
			info, err = os.Stat(p)
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		entry := path.Join(name, filepath.ToSlash(rel))
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return nil // devices, sockets, pipes
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = entry
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		_ = f.Close()
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// downloadScript writes a tar stream of $2 (a name in directory $1, or
// "." for the directory itself) to stdout.
const downloadScript = `cd -- "$1" || exit 2
if [ "$2" = . ]; then exec tar -c -f - .; fi
[ -e "./$2" ] || [ -L "./$2" ] || { echo "$2: No such file or directory" >&2; exit 2; }
exec tar -c -f - "./$2"
`

// Download copies src in the sandbox (file or directory; relative to the
// workspace) to the local path dest, like cp -r: into dest when it is an
// existing directory, else as dest. Archive entries that would land
// outside the destination are refused.
func Download(ctx context.Context, s Starter, src, dest string) error {
	clean := path.Clean(src)
	dir, name := path.Dir(clean), path.Base(clean)
	if clean == "." || clean == "/" {
		dir, name = clean, "."
	}
	root, rename := dest, ""
	if info, err := os.Stat(dest); err == nil && info.IsDir() {
		if name == "." {
			rename = "."
		}
	} else {
		root, rename = filepath.Dir(dest), filepath.Base(dest)
		if name == "." {
			if err := os.MkdirAll(dest, 0o755); err != nil {
				return fmt.Errorf("creating %s: %w", dest, err)
			}
			root, rename = dest, "."
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("opening %s: %w", root, err)
	}
	defer func() { _ = r.Close() }()

	pr, pw := io.Pipe()
	extracted := make(chan error, 1)
	go func() {
		err := extractTar(pr, r, name, rename)
		// Drain so the process is never blocked on a reader that quit.
		_, _ = io.Copy(io.Discard, pr)
		extracted <- err
	}()
	stderr := capbuf.New(maxStderr)
	code, err := Run(ctx, s, []string{"/bin/sh", "-c", downloadScript, "sh", dir, name}, nil, pw, stderr)
	_ = pw.Close()
	xerr := <-extracted
	switch {
	case err != nil:
		return fmt.Errorf("copying %s from the sandbox: %w", src, err)
	case code != 0:
		return commandError("copying "+src+" from the sandbox", code, stderr)
	case xerr != nil:
		return fmt.Errorf("writing %s: %w", dest, xerr)
	}
	return nil
}

// extractTar unpacks a stream whose entries are ./<top>/... into r,
// renaming <top> to rename when it is set ("." puts the contents in the
// root itself). os.Root refuses paths and symlinks that leave r.
func extractTar(in io.Reader, r *os.Root, top, rename string) error {
	tr := tar.NewReader(in)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		name, ok := mapEntry(hdr.Name, top, rename)
		if !ok {
			return fmt.Errorf("refusing archive entry %q outside the copied path", hdr.Name)
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name == "." {
				continue
			}
			if err := r.MkdirAll(name, 0o755); err != nil {
				return err
			}
			_ = r.Chmod(name, mode|0o700)
		case tar.TypeReg:
			if err := mkParent(r, name); err != nil {
				return err
			}
			f, err := r.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			_ = r.Chmod(name, mode)
		case tar.TypeSymlink:
			if err := mkParent(r, name); err != nil {
				return err
			}
			_ = r.Remove(name)
			if err := r.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		default:
			// Hard links, devices and the like are skipped.
		}
	}
}

func mkParent(r *os.Root, name string) error {
	if d := path.Dir(name); d != "." {
		return r.MkdirAll(d, 0o755)
	}
	return nil
}

// mapEntry maps an archive entry name to a path under the destination
// root. Entries must be top or under it; "." as top takes everything.
func mapEntry(entry, top, rename string) (string, bool) {
	e := path.Clean(strings.TrimPrefix(entry, "./"))
	if path.IsAbs(e) || e == ".." || strings.HasPrefix(e, "../") {
		return "", false
	}
	if top != "." {
		if e != top && !strings.HasPrefix(e, top+"/") {
			return "", false
		}
		if rename != "" {
			e = path.Join(rename, strings.TrimPrefix(e, top))
		}
		return e, true
	}
	if rename != "" && rename != "." {
		e = path.Join(rename, e)
	}
	return e, true
}

// CleanWorkspacePath confines a path given to the MCP tools to the
// sandbox's workspace, as the runtime's file API does: absolute paths are
// taken as workspace-relative, and paths climbing out are refused.
func CleanWorkspacePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("path contains a NUL byte")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("path %q leaves the sandbox workspace", p)
		}
	}
	c := path.Clean("/" + p)[1:]
	if c == "" {
		return ".", nil
	}
	return c, nil
}

// writeScript stores stdin at $1, creating its parent directories.
const writeScript = `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`

// WriteFile stores content at the workspace-relative path p: bare file
// names through the runtime's file API, nested paths through the process
// API (which creates the parent directories).
func WriteFile(ctx context.Context, sb *sandbox.Sandbox, p string, content []byte) error {
	if p == "." || strings.HasSuffix(p, "/") {
		return fmt.Errorf("path %q is a directory", p)
	}
	if !strings.Contains(p, "/") {
		return sb.Files().Write(ctx, p, content)
	}
	stderr := capbuf.New(maxStderr)
	code, err := Run(ctx, sb, []string{"/bin/sh", "-c", writeScript, "sh", p}, bytes.NewReader(content), nil, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return commandError("writing "+p, code, stderr)
	}
	return nil
}

// Cat streams the workspace-relative file p to w through the process API.
func Cat(ctx context.Context, s Starter, p string, w io.Writer) error {
	stderr := capbuf.New(maxStderr)
	code, err := Run(ctx, s, []string{"cat", "--", p}, nil, w, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return commandError("reading "+p, code, stderr)
	}
	return nil
}

// WriteStream stores what r yields at the workspace-relative path p,
// creating its parent directories, streaming through the process API.
func WriteStream(ctx context.Context, s Starter, p string, r io.Reader) error {
	if p == "." || strings.HasSuffix(p, "/") {
		return fmt.Errorf("path %q is a directory", p)
	}
	stderr := capbuf.New(maxStderr)
	code, err := Run(ctx, s, []string{"/bin/sh", "-c", writeScript, "sh", p}, r, nil, stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return commandError("writing "+p, code, stderr)
	}
	return nil
}

package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

type mountEntry struct {
	mountPoint string
	fstype     string
	source     string
}

// parseMountinfo parses one line of /proc/self/mountinfo.
func parseMountinfo(line string) (mountEntry, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return mountEntry{}, false
	}
	f := strings.Fields(pre)
	g := strings.Fields(post)
	if len(f) < 5 || len(g) < 2 {
		return mountEntry{}, false
	}
	return mountEntry{mountPoint: unescapeMountPath(f[4]), fstype: g[0], source: g[1]}, true
}

// unescapeMountPath undoes the octal escapes (\040 for space, ...) the kernel
// uses in mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountsUnder lists mount points equal to or below any of the prefixes.
func mountsUnder(prefixes ...string) ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, ok := parseMountinfo(sc.Text())
		if !ok {
			continue
		}
		for _, p := range prefixes {
			p = strings.TrimRight(p, "/")
			if m.mountPoint == p || strings.HasPrefix(m.mountPoint, p+"/") {
				out = append(out, m)
				break
			}
		}
	}
	return out, sc.Err()
}

// unmountUnder unmounts everything below the prefixes, deepest first, lazily
// if a plain unmount fails (a busy mount must not block cleanup). A path
// mounted several times over is unmounted until nothing is left.
func unmountUnder(prefixes ...string) error {
	var errs []error
	for range 5 {
		ms, err := mountsUnder(prefixes...)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		sort.Slice(ms, func(i, j int) bool { return len(ms[i].mountPoint) > len(ms[j].mountPoint) })
		errs = errs[:0]
		for _, m := range ms {
			if err := syscall.Unmount(m.mountPoint, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				if err2 := syscall.Unmount(m.mountPoint, syscall.MNT_DETACH); err2 != nil && !errors.Is(err2, syscall.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", m.mountPoint, err2))
				}
			}
		}
	}
	return errors.Join(errs...)
}

package localcluster

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// There is no registry: images are tarballs (built reproducibly by
// internal/images, or any docker-save/OCI archive) imported into
// containerd's k8s.io namespace, the one the CRI plugin serves; pods use
// imagePullPolicy IfNotPresent/Never.

// pauseTarball builds (once per pause binary) the pause image tarball.
func (c *Cluster) pauseTarball() (string, error) {
	sum, err := FileSHA256(c.bins.Pause)
	if err != nil {
		return "", fmt.Errorf("hash pause binary: %w", err)
	}
	out := filepath.Join(c.cfg.imageCacheDir(), "pause-"+sum[:12]+".oci.tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	_, err = images.WriteTarball(images.Spec{
		Ref:        PauseImage,
		Files:      []images.File{{Path: "/pause", Mode: 0o755, Source: c.bins.Pause}},
		Entrypoint: []string{"/pause"},
	}, out)
	return out, err
}

// FileSHA256 returns the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// importRecord remembers which tarball (by content hash) produced which
// image references, so unchanged tarballs are not imported again. It lives
// in containerd's root, so it disappears together with the images.
type importRecord map[string]struct {
	SHA256 string   `json:"sha256"`
	Refs   []string `json:"refs"`
}

func (c Config) importRecordPath() string {
	return filepath.Join(c.containerdRoot(), "agent-sandbox-imports.json")
}

func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--address", c.cfg.containerdSocket(), "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, c.bins.Ctr, full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImages imports image tarballs (docker-save or OCI archives) into
// containerd's k8s.io namespace, skipping those already imported unchanged.
// containerd must be running.
func (c *Cluster) ImportImages(ctx context.Context, paths ...string) error {
	if len(paths) == 0 {
		return nil
	}
	rec := importRecord{}
	if data, err := os.ReadFile(c.cfg.importRecordPath()); err == nil {
		_ = json.Unmarshal(data, &rec)
	}
	listing, err := c.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, l := range strings.Fields(listing) {
		present[l] = true
	}
	changed := false
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return fmt.Errorf("image %s: %w", p, err)
		}
		sum, err := FileSHA256(abs)
		if err != nil {
			return userError(err, "build the image first (see `make images`)", "image tarball %s is unreadable", abs)
		}
		if r, ok := rec[abs]; ok && r.SHA256 == sum && allPresent(r.Refs, present) {
			continue
		}
		refs, err := tarballRefs(abs)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			return fmt.Errorf("image tarball %s names no image (tag it when building)", abs)
		}
		if _, err := c.ctr(ctx, "images", "import", abs); err != nil {
			return fmt.Errorf("import %s: %w", abs, err)
		}
		rec[abs] = struct {
			SHA256 string   `json:"sha256"`
			Refs   []string `json:"refs"`
		}{sum, refs}
		changed = true
	}
	if !changed {
		return nil
	}
	data, _ := json.MarshalIndent(rec, "", "  ")
	return writeFileIfChanged(c.cfg.importRecordPath(), data, 0o644)
}

func allPresent(refs []string, present map[string]bool) bool {
	for _, r := range refs {
		if !present[r] {
			return false
		}
	}
	return len(refs) > 0
}

// tarballRefs reads the image names a tarball will be imported as: the
// RepoTags of a docker-save archive, or the image-name annotations of an OCI
// archive's index.json.
func tarballRefs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: neither manifest.json nor index.json found", path)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		switch strings.TrimPrefix(hdr.Name, "./") {
		case "manifest.json":
			var m []struct{ RepoTags []string }
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				return nil, fmt.Errorf("%s: manifest.json: %w", path, err)
			}
			var refs []string
			for _, e := range m {
				refs = append(refs, e.RepoTags...)
			}
			return normalizeRefs(refs), nil
		case "index.json":
			var idx struct {
				Manifests []struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"manifests"`
			}
			if err := json.NewDecoder(tr).Decode(&idx); err != nil {
				return nil, fmt.Errorf("%s: index.json: %w", path, err)
			}
			var refs []string
			for _, m := range idx.Manifests {
				if n := m.Annotations["io.containerd.image.name"]; n != "" {
					refs = append(refs, n)
				} else if n := m.Annotations["org.opencontainers.image.ref.name"]; strings.ContainsAny(n, "/:") {
					refs = append(refs, n)
				}
			}
			return normalizeRefs(refs), nil
		}
	}
}

// normalizeRefs expands short names the way containerd stores them
// ("busybox:1" -> "docker.io/library/busybox:1").
func normalizeRefs(refs []string) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		if n, err := images.NormalizeRef(r); err == nil {
			r = n
		}
		out = append(out, r)
	}
	return out
}

package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// remoteNames maps an image of this repository to its name in a registry:
// the reference project's release names, so a chart or manifest written for
// it finds ours under the same REGISTRY prefix.
var remoteNames = map[string]string{
	"controller":     "agent-sandbox-controller",
	"router":         "sandbox-router-go",
	"sandboxd":       "sandboxd",
	"python-runtime": "python-runtime-sandbox",
	"jupyterlab":     "jupyterlab",
	"chrome":         "chrome-sandbox",
}

// RemoteName is the registry name of image n.
func RemoteName(n string) string {
	if r, ok := remoteNames[n]; ok {
		return r
	}
	return n
}

// archive is one built image archive and the platform it is for.
type archive struct {
	path string
	arch string
}

// pushIndex uploads the images in archives as one OCI image index tagged
// ref, with a platform entry per archive, and returns the index digest
// (what a node that pulls ref records). The manifests are pushed as built,
// so their digests equal the archives'.
func pushIndex(ctx context.Context, ref string, archives []archive, insecure bool) (v1.Hash, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.ParseReference(ref, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, a := range archives {
		img, cleanup, err := imageFromArchive(a.path)
		if err != nil {
			return v1.Hash{}, err
		}
		defer cleanup()
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a.arch}},
		})
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	return idx.Digest()
}

// imageFromArchive reads the OCI image layout inside an archive that
// images.WriteTarball wrote (it also holds a docker-save manifest, whose
// reading would re-encode the manifest and change its digest). The layout is
// unpacked into a temporary directory that cleanup removes.
func imageFromArchive(path string) (v1.Image, func(), error) {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".push-*")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	if err := untar(path, dir); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("unpack %s: %w", path, err)
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("%s holds no OCI layout: %w", path, err)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	m, err := ii.IndexManifest()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if len(m.Manifests) != 1 {
		cleanup()
		return nil, nil, fmt.Errorf("%s: %d manifests in index.json, want 1", path, len(m.Manifests))
	}
	img, err := ii.Image(m.Manifests[0].Digest)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return img, cleanup, nil
}

// untar extracts the regular files and directories of a tar archive into
// dir, refusing names that would leave it.
func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := filepath.Clean(h.Name)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		target := filepath.Join(dir, clean)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

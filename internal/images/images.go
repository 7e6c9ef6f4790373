// Package images builds container images locally, without a registry, and
// reproducibly: the same inputs give the same bytes and so the same digest.
//
// An image is described by a Spec: an optional base root file system (a host
// directory, e.g. made by debootstrap) packed as the first layer, then one
// layer with the listed directories, files and symlinks, and the runtime
// config (entrypoint, env, user, working dir, exposed ports). WriteTarball
// writes it as one archive that holds both an OCI image layout (index.json,
// blobs/) and a docker-save manifest.json, so `ctr images import`, `docker
// load` and go-containerregistry's tarball package all read it.
//
// Reproducibility: tar entries are sorted and carry no user names or
// access/change times, generated entries use the fixed time Epoch, gzip
// output has no timestamp, and the config's creation times are Epoch. Files
// of a base root file system keep their (cached, hence fixed) modification
// times, because Python's byte-code caches record source mtimes.
package images

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the timestamp of every generated tar entry and of the config.
var Epoch = time.Unix(0, 0).UTC()

// Spec describes one image.
type Spec struct {
	// Ref names the image, e.g. "localhost/agent-sandbox/sandboxd:dev". It
	// is recorded in the archive (RepoTags and the containerd name
	// annotation, normalized like Docker does); it does not affect the
	// image digest.
	Ref string
	// BaseRootfs is a host directory packed as the first layer (owners,
	// modes, symlinks and hard links kept; device nodes, sockets and FIFOs
	// skipped). Empty means no base layer.
	BaseRootfs string
	// Dirs, Files and Symlinks make up the top layer. Missing parent
	// directories are added as root-owned 0755.
	Dirs     []Dir
	Files    []File
	Symlinks []Symlink

	Entrypoint []string
	Cmd        []string
	// Env entries are "NAME=value".
	Env        []string
	WorkingDir string
	// User is "uid[:gid]" or a name the image's /etc/passwd knows.
	User string
	// ExposedPorts are "port/proto", e.g. "8080/tcp".
	ExposedPorts []string
	Labels       map[string]string
	// Architecture defaults to the GOARCH of the building process.
	Architecture string
}

// Dir is a directory in the image.
type Dir struct {
	Path     string      // absolute path in the image
	Mode     fs.FileMode // permission and sticky/setgid bits; 0 means 0755
	UID, GID int
}

// File is a regular file in the image, from Content or, when Source is
// set, from a host file.
type File struct {
	Path     string      // absolute path in the image
	Mode     fs.FileMode // permission bits; 0 means 0644
	UID, GID int
	Content  []byte
	Source   string
}

// Symlink is a symbolic link in the image.
type Symlink struct {
	Path   string // absolute path in the image
	Target string
}

// WriteTarball builds the image of spec and writes it atomically to path.
// It returns the manifest digest, which is also the digest containerd
// reports after importing the archive. Temporary layer files are created
// next to path.
func WriteTarball(spec Spec, path string) (v1.Hash, error) {
	if spec.Ref == "" {
		return v1.Hash{}, errors.New("image ref is required")
	}
	ref, err := NormalizeRef(spec.Ref)
	if err != nil {
		return v1.Hash{}, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return v1.Hash{}, fmt.Errorf("create output directory: %w", err)
	}
	var layers []*fileLayer
	defer func() {
		for _, l := range layers {
			l.remove()
		}
	}()
	if spec.BaseRootfs != "" {
		l, err := rootfsLayer(dir, spec.BaseRootfs)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("base layer of %s: %w", spec.Ref, err)
		}
		layers = append(layers, l)
	}
	l, err := filesLayer(dir, spec)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("files layer of %s: %w", spec.Ref, err)
	}
	layers = append(layers, l)

	img, err := assemble(spec, layers)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("assemble %s: %w", spec.Ref, err)
	}
	if err := writeArchive(img, ref, path); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", path, err)
	}
	return img.Digest()
}

// assemble stacks the layers on an empty OCI image and sets the config.
func assemble(spec Spec, layers []*fileLayer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, fl := range layers {
		l, err := fl.layer()
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "agent-sandbox/internal/images: " + fl.desc},
		})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: Epoch}
	cf.OS = "linux"
	cf.Architecture = spec.Architecture
	if cf.Architecture == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Config = v1.Config{
		Entrypoint: slices.Clone(spec.Entrypoint),
		Cmd:        slices.Clone(spec.Cmd),
		Env:        slices.Clone(spec.Env),
		WorkingDir: spec.WorkingDir,
		User:       spec.User,
		Labels:     maps.Clone(spec.Labels),
	}
	if len(spec.ExposedPorts) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range spec.ExposedPorts {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	return mutate.ConfigFile(img, cf)
}

package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NormalizeRef completes a familiar image name the way Docker and
// containerd do: "name" becomes "docker.io/library/name:latest", a first
// component without a dot or colon that is not "localhost" gets
// "docker.io/", and a missing tag becomes ":latest".
func NormalizeRef(ref string) (string, error) {
	if ref == "" || strings.ContainsAny(ref, " \t\n") || strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/") {
		return "", fmt.Errorf("invalid image ref %q", ref)
	}
	name, digest, _ := strings.Cut(ref, "@")
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash {
		name = "docker.io/library/" + name
	} else if !strings.ContainsAny(first, ".:") && first != "localhost" {
		name = "docker.io/" + name
	}
	if digest != "" {
		return name + "@" + digest, nil
	}
	if i := strings.LastIndexByte(name, ':'); i < 0 || strings.Contains(name[i:], "/") {
		name += ":latest"
	}
	return name, nil
}

type ociIndex struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     types.MediaType `json:"mediaType"`
	Manifests     []v1.Descriptor `json:"manifests"`
}

type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

const (
	annotationContainerdName = "io.containerd.image.name"
	annotationOCIRefName     = "org.opencontainers.image.ref.name"
)

func blobName(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// writeArchive writes img as an OCI layout plus a docker-save manifest in
// one tar, through a temporary file renamed into place.
func writeArchive(img v1.Image, ref, path string) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	tag := ref
	if i := strings.LastIndexByte(ref, ':'); i >= 0 && !strings.Contains(ref[i:], "/") && !strings.Contains(ref, "@") {
		tag = ref[i+1:]
	}
	index := ociIndex{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Digest:    digest,
			Size:      int64(len(manifest)),
			Annotations: map[string]string{
				annotationContainerdName: ref,
				annotationOCIRefName:     tag,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	dm := []dockerManifest{{Config: blobName(configName), RepoTags: []string{ref}}}

	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	aw := &archiveWriter{tw: tar.NewWriter(tmp)}
	const layout = `{"imageLayoutVersion":"1.0.0"}`
	aw.file("oci-layout", int64(len(layout)), strings.NewReader(layout))
	aw.dir("blobs/")
	aw.dir("blobs/sha256/")
	aw.file(blobName(configName), int64(len(config)), bytes.NewReader(config))
	written := map[v1.Hash]bool{}
	for _, l := range layers {
		if aw.err != nil {
			break
		}
		d, err := l.Digest()
		if err != nil {
			return err
		}
		dm[0].Layers = append(dm[0].Layers, blobName(d))
		if written[d] {
			continue
		}
		written[d] = true
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		aw.file(blobName(d), size, rc)
		_ = rc.Close()
	}
	dmJSON, err := json.Marshal(dm)
	if err != nil {
		return err
	}
	aw.file(blobName(digest), int64(len(manifest)), bytes.NewReader(manifest))
	aw.file("index.json", int64(len(indexJSON)), bytes.NewReader(indexJSON))
	aw.file("manifest.json", int64(len(dmJSON)), bytes.NewReader(dmJSON))
	if aw.err != nil {
		return aw.err
	}
	if err := aw.tw.Close(); err != nil {
		return err
	}
	// CreateTemp made the file 0600; archives are not secret.
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	ok = true
	return nil
}

// archiveWriter writes fixed-metadata tar entries and keeps the first
// error, so a sequence of writes needs one check at the end.
type archiveWriter struct {
	tw  *tar.Writer
	err error
}

func (a *archiveWriter) dir(name string) {
	if a.err == nil {
		a.err = a.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch})
	}
}

func (a *archiveWriter) file(name string, size int64, r io.Reader) {
	if a.err != nil {
		return
	}
	if a.err = a.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: Epoch}); a.err != nil {
		return
	}
	n, err := io.Copy(a.tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("%s: wrote %d of %d bytes", name, n, size)
	}
	a.err = err
}

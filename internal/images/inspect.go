package images

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Info describes an image archive written by WriteTarball.
type Info struct {
	// Ref is the normalized name recorded in the archive.
	Ref string
	// Digest is the manifest digest.
	Digest   v1.Hash
	Manifest v1.Manifest
	Config   v1.ConfigFile
}

// Inspect reads the OCI index, manifest and config of an image archive and
// checks that every blob the manifest names is present with its size.
func Inspect(path string) (*Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	files := map[string][]byte{} // small JSON entries
	sizes := map[string]int64{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		sizes[hdr.Name] = hdr.Size
		if hdr.Typeflag == tar.TypeReg && hdr.Size < 1<<20 {
			if files[hdr.Name], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
	var idx ociIndex
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if len(idx.Manifests) != 1 {
		return nil, fmt.Errorf("index.json lists %d manifests, want 1", len(idx.Manifests))
	}
	info := &Info{Ref: idx.Manifests[0].Annotations[annotationContainerdName], Digest: idx.Manifests[0].Digest}
	raw, ok := files[blobName(info.Digest)]
	if !ok {
		return nil, errors.New("manifest blob missing")
	}
	if got, _, err := v1.SHA256(bytes.NewReader(raw)); err != nil || got != info.Digest {
		return nil, fmt.Errorf("manifest digest %v does not match index %v", got, info.Digest)
	}
	if err := json.Unmarshal(raw, &info.Manifest); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	cfg, ok := files[blobName(info.Manifest.Config.Digest)]
	if !ok {
		return nil, errors.New("config blob missing")
	}
	if err := json.Unmarshal(cfg, &info.Config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for _, l := range info.Manifest.Layers {
		if sizes[blobName(l.Digest)] != l.Size {
			return nil, fmt.Errorf("layer %v: size %d in archive, %d in manifest", l.Digest, sizes[blobName(l.Digest)], l.Size)
		}
	}
	return info, nil
}

package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"sigs.k8s.io/agent-sandbox/internal/images"
)

// writeArchive writes the archive of spec to path unless the one already
// there was made from the same inputs: <path>.stamp records a hash of the
// spec, of the host files it copies, of the base root file system's marker
// and of the running program (so a change to the image code rewrites the
// archives too), followed by the digest. Archives are reproducible, so a
// skipped write would have produced the same bytes; skipping saves packing
// hundreds of MB on every `make images`.
func writeArchive(spec images.Spec, path string) (v1.Hash, error) {
	stamp, err := inputStamp(spec)
	if err != nil {
		return v1.Hash{}, err
	}
	if digest, ok := stampedDigest(path, stamp); ok {
		return digest, nil
	}
	_ = os.Remove(path + ".stamp")
	digest, err := images.WriteTarball(spec, path)
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, os.WriteFile(path+".stamp", []byte(stamp+"\n"+digest.String()+"\n"), 0o644)
}

// stampedDigest returns the digest recorded for path when its stamp matches
// and the archive is still there.
func stampedDigest(path, stamp string) (v1.Hash, bool) {
	b, err := os.ReadFile(path + ".stamp")
	if err != nil {
		return v1.Hash{}, false
	}
	got, digest, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if got != stamp {
		return v1.Hash{}, false
	}
	if _, err := os.Stat(path); err != nil {
		return v1.Hash{}, false
	}
	h, err := v1.NewHash(digest)
	return h, err == nil
}

// inputStamp hashes what the archive of spec is made from.
func inputStamp(spec images.Spec) (string, error) {
	h := sha256.New()
	b, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	h.Write(b)
	hashFile := func(label, p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		fmt.Fprintf(h, "\n%s %s\n", label, p)
		_, err = io.Copy(h, f)
		return err
	}
	for _, f := range spec.Files {
		if f.Source != "" {
			if err := hashFile("file", f.Source); err != nil {
				return "", err
			}
		}
	}
	if spec.BaseRootfs != "" {
		// Root file systems are never changed once their marker is
		// written; a rebuild writes a new marker.
		fi, err := os.Stat(spec.BaseRootfs + ".ok")
		if err != nil {
			return "", fmt.Errorf("base root file system %s has no marker: %w", spec.BaseRootfs, err)
		}
		fmt.Fprintf(h, "\nbase %s %d\n", spec.BaseRootfs, fi.ModTime().UnixNano())
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if err := hashFile("program", exe); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

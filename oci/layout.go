package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/internal/atomicfile"
)

// writeLayout adds an image or an index (exactly one is non-nil) to the OCI
// layout at r.Path, made if missing, under r.Tag if given (taken from what
// had it). go-containerregistry's layout writer truncates index.json and
// writes it again, and writes manifests straight under their digests: a
// full disk or a kill there lost every tag of the layout, and two runs at
// once lost each other's tags. Here:
//   - runs on one layout take turns (an flock on its directory);
//   - a blob appears whole under its digest (a temp file beside it, of
//     the descriptor's size, synced, renamed), and index.json is replaced
//     at once, after the blobs it names are synced;
//   - a layout this call made is removed again if it fails;
//   - ctx ends the wait for the lock and a blob copy (within 64 MiB).
func writeLayout(ctx context.Context, r Ref, img v1.Image, idx v1.ImageIndex) error {
	l, err := lockLayout(ctx, r.Path)
	if err != nil {
		return fmt.Errorf("%s: %w", r, err)
	}
	defer l.dir.Close() // and the lock with it
	if err = l.add(r.Tag, img, idx); err != nil {
		if l.made {
			os.RemoveAll(l.path)
		}
		return fmt.Errorf("write %s: %w", r, err)
	}
	return nil
}

// layoutDir is an OCI layout locked for writing.
type layoutDir struct {
	ctx    context.Context // of the write
	path   string
	dir    *os.File // holds the flock
	made   bool     // by this call: no layout was there
	locked bool     // false where the filesystem has no locks
	have   map[v1.Hash]bool
}

// lockLayout makes the directory of a layout if missing and locks it,
// waiting for another writer until ctx ends.
func lockLayout(ctx context.Context, path string) (*layoutDir, error) {
	path = filepath.Clean(path) // "dir/" is dir, made here or not
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	for {
		made := false
		switch err := os.Mkdir(path, 0o755); {
		case err == nil:
			made = true
		case !errors.Is(err, fs.ErrExist):
			return nil, err
		}
		// A FIFO or a file there fails here, not blocks.
		d, err := atomicfile.OpenDir(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since Mkdir by a run that made it and failed
		}
		if err != nil {
			return nil, err
		}
		locked, err := atomicfile.Flock(ctx, d, nil)
		if err != nil {
			d.Close()
			return nil, &os.PathError{Op: "lock", Path: path, Err: err}
		}
		// A run that made the layout and failed removes it: then it is
		// not this directory any more, and the layout is made again.
		held, err1 := d.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			if made {
				// Made here, but another run may have filled it
				// while this one waited for the lock.
				_, err := os.Stat(filepath.Join(path, "index.json"))
				made = errors.Is(err, fs.ErrNotExist)
			}
			return &layoutDir{ctx: ctx, path: path, dir: d, made: made, locked: locked, have: map[v1.Hash]bool{}}, nil
		}
		d.Close()
	}
}

func (l *layoutDir) add(tag string, img v1.Image, idx v1.ImageIndex) error {
	// The index first: one that does not parse stops the write before
	// any blob is copied.
	im := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	raw, err := os.ReadFile(filepath.Join(l.path, "index.json"))
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &im); err != nil {
			return fmt.Errorf("index.json: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if l.locked {
		// Temp files of a writer killed before its rename: none is
		// alive while this one holds the lock.
		for _, dir := range []string{l.path, filepath.Join(l.path, "blobs", "sha256")} {
			stale, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
			for _, p := range stale {
				os.Remove(p)
			}
		}
	}
	var desc v1.Descriptor
	if img != nil {
		desc, err = l.writeImage(img)
	} else {
		desc, err = l.writeIndex(idx)
	}
	if err != nil {
		return err
	}
	// The blobs' names, the blob directories, and a new layout's own.
	dirs := []string{filepath.Join(l.path, "blobs", "sha256"), filepath.Join(l.path, "blobs")}
	if l.made {
		dirs = append(dirs, filepath.Dir(l.path))
	}
	for _, dir := range dirs {
		if err := atomicfile.SyncDir(dir); err != nil {
			return err
		}
	}
	if tag != "" {
		desc.Annotations = map[string]string{refNameAnnotation: tag}
	}
	// A tag names one manifest: replace what had it; an untagged manifest
	// is listed once.
	kept := im.Manifests[:0]
	for _, d := range im.Manifests {
		name, tagged := d.Annotations[refNameAnnotation]
		if tag != "" && name == tag || tag == "" && !tagged && d.Digest == desc.Digest {
			continue
		}
		kept = append(kept, d)
	}
	im.Manifests = append(kept, desc)
	if raw, err = json.MarshalIndent(im, "", "   "); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(l.path, "oci-layout")); errors.Is(err, fs.ErrNotExist) {
		if err := atomicfile.WriteFile(filepath.Join(l.path, "oci-layout"), []byte(`{"imageLayoutVersion": "1.0.0"}`)); err != nil {
			return err
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(l.path, "index.json"), raw); err != nil {
		return err
	}
	return atomicfile.SyncDir(l.path)
}

// writeImage writes an image's blobs: layers, config, manifest.
func (l *layoutDir) writeImage(img v1.Image) (v1.Descriptor, error) {
	layers, err := img.Layers()
	if err != nil {
		return v1.Descriptor{}, err
	}
	for _, layer := range layers {
		dg, err := layer.Digest()
		if err != nil {
			return v1.Descriptor{}, err
		}
		size, err := layer.Size()
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("layer %s: %w", dg, err)
		}
		if err := l.writeBlob(dg, size, layer.Compressed); err != nil {
			return v1.Descriptor{}, fmt.Errorf("layer %s: %w", dg, err)
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return v1.Descriptor{}, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := l.writeBlobBytes(cfgName, cfg); err != nil {
		return v1.Descriptor{}, fmt.Errorf("config %s: %w", cfgName, err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return l.writeManifest(mt, img.Digest, img.RawManifest)
}

// writeIndex writes an index's manifests, nested indexes too, and its own.
func (l *layoutDir) writeIndex(idx v1.ImageIndex) (v1.Descriptor, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err == nil {
				_, err = l.writeIndex(child)
			}
			if err != nil {
				return v1.Descriptor{}, fmt.Errorf("index %s: %w", d.Digest, err)
			}
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err == nil {
				_, err = l.writeImage(img)
			}
			if err != nil {
				return v1.Descriptor{}, fmt.Errorf("manifest %s: %w", d.Digest, err)
			}
		default:
			return v1.Descriptor{}, fmt.Errorf("manifest %s: media type %s is neither an image nor an index", d.Digest, d.MediaType)
		}
	}
	mt, err := idx.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return l.writeManifest(mt, idx.Digest, idx.RawManifest)
}

func (l *layoutDir) writeManifest(mt types.MediaType, digest func() (v1.Hash, error), manifest func() ([]byte, error)) (v1.Descriptor, error) {
	dg, err := digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	raw, err := manifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := l.writeBlobBytes(dg, raw); err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest %s: %w", dg, err)
	}
	return v1.Descriptor{MediaType: mt, Digest: dg, Size: int64(len(raw))}, nil
}

func (l *layoutDir) writeBlobBytes(dg v1.Hash, b []byte) error {
	return l.writeBlob(dg, int64(len(b)), func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}

// writeBlob writes the blob dg of size bytes, unless the layout has it: a
// file of that size under its name (blobs are only ever renamed into
// place whole). What open gives is checked against size; its digest is
// not computed again (a converted layer's was computed from its file, a
// registry's layers are checked as they are read), which would cost a
// second read and hash of every layer.
func (l *layoutDir) writeBlob(dg v1.Hash, size int64, open func() (io.ReadCloser, error)) error {
	if l.have[dg] {
		return nil
	}
	if dg.Algorithm != "sha256" || len(dg.Hex) != sha256.Size*2 {
		return fmt.Errorf("digest %s: only sha256 digests are written", dg)
	}
	dir := filepath.Join(l.path, "blobs", "sha256")
	p := filepath.Join(dir, dg.Hex)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		l.have[dg] = true
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	err = atomicfile.Replace(p, func(f *os.File) error {
		// In pieces, to see ctx end; io.CopyN keeps copy_file_range
		// between files.
		var n int64
		for {
			if err := l.ctx.Err(); err != nil {
				return err
			}
			m, err := io.CopyN(f, rc, 64<<20)
			n += m
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		if n != size {
			return fmt.Errorf("%d bytes, the descriptor says %d", n, size)
		}
		return nil
	})
	if err == nil {
		l.have[dg] = true
	}
	return err
}

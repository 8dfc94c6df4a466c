package mirror

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A layer converted on top of cached layers needs their directories: a
// directory it implies takes its metadata from below (convert's lower.go).
// The converter learns them by reading the lower layers' tars, which for a
// large shared base costs as much as downloading and decompressing it for
// every image. A skeleton is a stand-in with the same directory record:
// every entry of the layer in order, directories with their owner, mode,
// mtime and xattrs, everything else as an empty regular file (a
// non-directory that hides what was below: what the record keeps of it),
// whiteouts as they are. It is made once per layer, kept next to the layer
// cache, and the converter reads it instead of the layer.

// makeSkeleton reads a layer's tar and writes its skeleton, gzipped.
func makeSkeleton(l v1.Layer) ([]byte, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("skeleton: %w", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader || hdr.Typeflag == 'V' {
			continue // no file: the converter skips them too
		}
		h := &tar.Header{Name: hdr.Name, Mode: hdr.Mode, Uid: hdr.Uid, Gid: hdr.Gid, ModTime: hdr.ModTime,
			Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if hdr.Typeflag == tar.TypeDir {
			h.Typeflag = tar.TypeDir
			for k, v := range hdr.PAXRecords {
				if strings.HasPrefix(k, "SCHILY.xattr.") || strings.HasPrefix(k, "LIBARCHIVE.xattr.") {
					if h.PAXRecords == nil {
						h.PAXRecords = map[string]string{}
					}
					h.PAXRecords[k] = v
				}
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("skeleton of %q: %w", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// skeletonLayer is a skeleton as a gzip tar layer; diffID is its tar's.
type skeletonLayer struct {
	gz     []byte
	digest v1.Hash
	diffID v1.Hash
}

func newSkeletonLayer(gz []byte) (*skeletonLayer, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("skeleton: %w", err)
	}
	diff, _, err := v1.SHA256(zr)
	if err != nil {
		return nil, fmt.Errorf("skeleton: %w", err)
	}
	dg, _, _ := v1.SHA256(bytes.NewReader(gz))
	return &skeletonLayer{gz: gz, digest: dg, diffID: diff}, nil
}

func (s *skeletonLayer) Digest() (v1.Hash, error)            { return s.digest, nil }
func (s *skeletonLayer) DiffID() (v1.Hash, error)            { return s.diffID, nil }
func (s *skeletonLayer) Size() (int64, error)                { return int64(len(s.gz)), nil }
func (s *skeletonLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (s *skeletonLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(s.gz)), nil
}
func (s *skeletonLayer) Uncompressed() (io.ReadCloser, error) {
	return gzip.NewReader(bytes.NewReader(s.gz))
}

var errNoSkeleton = errors.New("no skeleton")

// skeletonImage returns the image cache.Cache.Image should read: src with each
// cached tar layer below the highest missing one replaced by its skeleton
// (fetched, or made now and kept), and the diff_ids of that image. ok is
// false when it cannot be made; the caller reads the real layers then.
func (j *twinJob) skeletonImage(src v1.Image, s *sourceImage, keys []string, entries []*LayerEntry, top int) (img v1.Image, diffIDs []v1.Hash, ok bool) {
	repl := map[int]replacement{}
	for i := 0; i < top; i++ {
		if entries[i] == nil {
			continue
		}
		gz, err := j.t.Cache.Skeleton(j.ctx, keys[i])
		if err == nil {
			j.out.SkeletonReads++
		} else {
			j.out.LayerReads++
			l, lerr := src.LayerByDigest(s.m.Layers[i].Digest)
			if lerr != nil {
				return nil, nil, false
			}
			if gz, err = makeSkeleton(l); err != nil {
				j.t.logf("layer %s: %v; reading the layer itself", s.m.Layers[i].Digest, err)
				return nil, nil, false
			}
			if err := j.t.Cache.PutSkeleton(j.ctx, keys[i], gz); err != nil {
				j.t.logf("layer %s: keeping its skeleton: %v", s.m.Layers[i].Digest, err)
			}
		}
		sl, err := newSkeletonLayer(gz)
		if err != nil {
			return nil, nil, false
		}
		repl[i] = replacement{desc: v1.Descriptor{MediaType: types.OCILayer, Digest: sl.digest, Size: int64(len(gz))}, diffID: sl.diffID.String(), layer: sl}
	}
	img, err := assemble(src, s, repl)
	if err != nil {
		return nil, nil, false
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, false
	}
	// cache.Cache.Image keys its files by diffID: they must stay distinct.
	seen := map[v1.Hash]bool{}
	for i, d := range cf.RootFS.DiffIDs {
		if isTarLayer(s.m.Layers[i].MediaType) {
			if seen[d] {
				return nil, nil, false
			}
			seen[d] = true
		}
	}
	return img, cf.RootFS.DiffIDs, true
}

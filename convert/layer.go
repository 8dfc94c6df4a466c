package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
)

// EROFS layer media types.
const (
	// MediaTypeLayer is what containerd ≥ 2.3 runs natively.
	MediaTypeLayer     types.MediaType = "application/vnd.erofs.layer.v1"
	MediaTypeLayerZstd types.MediaType = "application/vnd.erofs.layer.v1+zstd"
	// MediaTypeSpec and MediaTypeSpecZstd are the draft EROFS image spec's.
	MediaTypeSpec     types.MediaType = "application/vnd.erofs"
	MediaTypeSpecZstd types.MediaType = "application/vnd.erofs+zstd"
)

// Annotations ocierofs writes.
const (
	// AnnotationSourceLayer on a converted layer: the source layer's digest.
	AnnotationSourceLayer = "org.ocierofs.source.layer.digest"
	// AnnotationSourceManifest on a converted manifest (and index): the
	// source's digest. It is also the mirror's loop guard.
	AnnotationSourceManifest = "org.ocierofs.source.digest"
	// AnnotationUncompressed is the draft spec's DiffID annotation.
	AnnotationUncompressed = "org.erofs.uncompressed-digest"
)

// IsEROFS reports an EROFS layer media type (containerd's or the spec's).
func IsEROFS(mt types.MediaType) bool {
	switch mt {
	case MediaTypeLayer, MediaTypeLayerZstd, MediaTypeSpec, MediaTypeSpecZstd:
		return true
	}
	return false
}

// fileLayer is a converted layer kept in temp files: raw holds the EROFS
// image, blob what is published (raw itself, or its zstd form).
type fileLayer struct {
	raw, blob      string
	diffID, digest v1.Hash
	size           int64
	mediaType      types.MediaType
	rawSize        int64
	sourceDigest   v1.Hash
	entries        int
	warnings       []string
	convertSeconds float64
	uploadSeconds  float64
	// implied are the directories the layer implies, whose metadata came
	// from the layers below (the cache records them).
	implied []string
	// annotations go on the layer's descriptor (the EROFS image spec's);
	// chunkIndex is the standalone chunk-index layer that follows it.
	annotations map[string]string
	chunkIndex  *fileLayer
	// rootOpaque: it whites out what the layers below have at the root
	// (an opaque marker on its root), which the cache records too.
	rootOpaque bool
	// prefetchFound are the paths of the prefetch list the layer has.
	prefetchFound []string
}

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return l.mediaType, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.blob) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.raw) }

// hashFile returns the sha256 and size of a file.
func hashFile(name string) (v1.Hash, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, n, nil
}

// zstdFile compresses src into dst (one frame, default level, with the
// content size and checksum), deterministically.
func zstdFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	zw, err := zstd.NewWriter(out, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		out.Close()
		return err
	}
	if _, err := io.Copy(zw, in); err != nil {
		zw.Close()
		out.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

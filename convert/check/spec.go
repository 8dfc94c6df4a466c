package check

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/atomicfile"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// splitChunkIndexes takes the standalone chunk-index layers out of an
// image's layers and diff_ids, checking where each is (§3.8: neither
// first nor last, after an EROFS layer, naming it as its target, §3.4.3)
// and parsing it; c.layer checks its chunks with the layer it indexes.
func (c *checker) splitChunkIndexes(where string, img v1.Image, layers []v1.Descriptor, diffIDs []v1.Hash) ([]v1.Descriptor, []v1.Hash, error) {
	var keepL []v1.Descriptor
	var keepD []v1.Hash
	for i, d := range layers {
		if d.MediaType != convert.MediaTypeChunkIndex {
			keepL, keepD = append(keepL, d), append(keepD, diffIDs[i])
			continue
		}
		at := fmt.Sprintf("%s: layer %d (chunk index)", where, i+1)
		if d.Digest != diffIDs[i] {
			c.diff(at, "§5.2: diff_id %s, but a standalone chunk index's is its blob's digest %s", diffIDs[i], d.Digest)
		}
		if i == 0 || i == len(layers)-1 {
			c.diff(at, "§3.8: a standalone chunk-index layer is the first or the last of the manifest's layers")
			if i == 0 {
				continue
			}
		}
		prev := layers[i-1]
		if !convert.IsEROFS(prev.MediaType) {
			c.diff(at, "§3.4.3: indexes layer %d, a %s layer, not an EROFS one", i, prev.MediaType)
			continue
		}
		payload, err := spec.ReadChunkIndexBlob(img, d)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", at, err)
		}
		x, err := chunkindex.Standalone(payload, d.Annotations, prev.Digest.String(), prev.Size, layerCompression(prev.MediaType) == convert.Zstd)
		if err != nil {
			c.diff(at, "§3.4: %v", err)
			continue
		}
		if c.standalone == nil {
			c.standalone = map[v1.Hash]*chunkindex.Index{}
		}
		c.standalone[prev.Digest] = x
	}
	return keepL, keepD, nil
}

// specLayer checks the parts of the EROFS image spec a layer d carries:
// its chunk index (embedded or standalone), each chunk against its
// checksum and against the image data, and its dm-verity tree against
// the annotations. data is the layer's image data (size bytes: the blob
// decompressed) and l the layer, whose blob is read again where the
// index points into it.
func (c *checker) specLayer(where string, l v1.Layer, d v1.Descriptor, data *os.File, size int64) error {
	zstdLayer := layerCompression(d.MediaType) == convert.Zstd
	x := c.standalone[d.Digest]
	_, embedded := d.Annotations[chunkindex.AnnotationRange]
	if x != nil || embedded {
		blob, blobSize := data, size
		if zstdLayer {
			f, n, err := c.spoolBlob(l)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", where, d.Digest, err)
			}
			defer f.Close()
			blob, blobSize = f, n
		}
		if embedded {
			if x != nil {
				c.diff(where, "§3.4.3: an embedded chunk index and a standalone one after it")
			}
			var err error
			if x, err = chunkindex.Embedded(blob, blobSize, zstdLayer, d.Annotations); err != nil {
				c.diff(where, "§3.4: embedded chunk index: %v", err)
				x = nil
			}
		}
		if x != nil {
			c.chunks(where, blob, x, data, size)
		}
	}
	c.verity(where, d, data, size, x)
	return nil
}

// chunks reads every chunk of x from blob and compares it with the image
// data.
func (c *checker) chunks(where string, blob io.ReaderAt, x *chunkindex.Index, data io.ReaderAt, size int64) {
	want := size
	if x.Compression == chunkindex.None && x.DataEnd != 0 && int64(x.DataEnd) < size {
		// A raw blob's image data ends where its embedded index starts.
		want = int64(x.DataEnd)
	}
	if int64(x.UncompressedSize) != want {
		c.diff(where, "§3.4.1: the chunk index's UncompressedSize is %d, the image data %d bytes", x.UncompressedSize, want)
		return
	}
	if x.HashAlgo == chunkindex.HashNone {
		c.diff(where, "§3.4.5 (SHOULD): the chunk index has no per-chunk checksums")
	}
	r, err := chunkindex.NewReader(blob, x)
	if err != nil {
		c.diff(where, "§3.4: %v", err)
		return
	}
	var buf []byte
	for i := range x.Len() {
		got, err := r.ReadChunk(i)
		if err != nil {
			c.diff(where, "§3.4.4: %v", err)
			return
		}
		ch := x.Chunk(i)
		buf = append(buf[:0], make([]byte, len(got))...)
		if _, err := data.ReadAt(buf, int64(ch.UncompressedOffset)); err != nil || !bytes.Equal(buf, got) {
			c.diff(where, "§3.4.2: chunk %d (image bytes %d to %d) is not the image data there", i, ch.UncompressedOffset, ch.UncompressedOffset+ch.Len)
			return
		}
	}
}

// verity checks a layer's dm-verity annotations and tree (§3.5): the tree
// at hash_offset of the image data, after the whole EROFS image, every
// hash block and the root digest as annotated.
func (c *checker) verity(where string, d v1.Descriptor, data io.ReaderAt, size int64, x *chunkindex.Index) {
	ho, hasOff := d.Annotations[convert.AnnotationVerityHashOffset]
	root, hasRoot := d.Annotations[convert.AnnotationVerityRootDigest]
	if !hasOff && !hasRoot {
		return
	}
	if !hasOff || !hasRoot {
		c.diff(where, "§2.3: %s and %s go together", convert.AnnotationVerityHashOffset, convert.AnnotationVerityRootDigest)
		return
	}
	off, err := strconv.ParseUint(ho, 10, 63)
	if err != nil || strings.Trim(ho, "0123456789") != "" {
		c.diff(where, "§2.3: %s %q is not a decimal number", convert.AnnotationVerityHashOffset, ho)
		return
	}
	bs := uint64(4096)
	if s, ok := d.Annotations[convert.AnnotationVerityBlockSize]; ok {
		if bs, err = strconv.ParseUint(s, 10, 32); err != nil || strings.Trim(s, "0123456789") != "" {
			c.diff(where, "§2.3: %s %q is not a decimal number", convert.AnnotationVerityBlockSize, s)
			return
		}
	}
	if bs == 0 || off%bs != 0 {
		c.diff(where, "§3.5: hash_offset %d is not a multiple of the block size %d", off, bs)
		return
	}
	if bs != dmverity.BlockSize {
		c.diff(where, "§3.5: dm-verity block size %d: this checker reads trees of %d-byte blocks", bs, dmverity.BlockSize)
		return
	}
	alg, hexRoot, _ := strings.Cut(root, ":")
	if b, err := hex.DecodeString(hexRoot); alg != "sha256" || err != nil || len(b) != 32 {
		c.diff(where, "§2.3: %s %q is no sha256 digest", convert.AnnotationVerityRootDigest, root)
		return
	}
	if ei, err := erofs.Open(io.NewSectionReader(data, 0, size), size); err == nil {
		if img := uint64(ei.Super().Blocks) * uint64(ei.Super().BlockSize); img > off {
			c.diff(where, "§3.5: hash_offset %d is inside the EROFS image (%d bytes)", off, img)
		}
	}
	end := size
	if x != nil && x.Compression == chunkindex.None && int64(x.DataEnd) < size {
		end = int64(x.DataEnd)
	}
	if off >= uint64(end) {
		c.diff(where, "§3.5: hash_offset %d is past the image data's %d bytes", off, end)
		return
	}
	// The tree is read from the image data only: not from an index after it.
	if err := dmverity.Verify(io.NewSectionReader(data, 0, end), dmverity.Metadata{RootHash: hexRoot, HashOffset: off}); err != nil {
		c.diff(where, "§3.5: %v", err)
	}
}

// spoolBlob copies a layer's blob as it is into an unnamed file of
// TempDir, for the reads of an index that points into it.
func (c *checker) spoolBlob(l v1.Layer) (*os.File, int64, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	f, err := atomicfile.Unnamed(c.opt.TempDir, "ocierofs-check-*.blob")
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(f, c.capped(oci.ContextReader(c.ctx, rc)))
	if err != nil {
		f.Close()
		if errors.As(err, new(*convert.TooLargeError)) {
			err = fmt.Errorf("the blob is larger than the %d bytes a layer may have", c.opt.MaxLayerSize)
		}
		return nil, 0, err
	}
	return f, n, nil
}

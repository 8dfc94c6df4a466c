package convert

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// The dm-verity annotations of the EROFS image spec (§2.3, §3.5).
const (
	AnnotationVerityHashOffset = "org.erofs.dmverity.hash_offset"
	AnnotationVerityRootDigest = "org.erofs.dmverity.root_digest"
	AnnotationVerityBlockSize  = "org.erofs.dmverity.block_size"
)

// MediaTypeChunkIndex is a standalone chunk-index layer's.
const MediaTypeChunkIndex types.MediaType = chunkindex.MediaType

// ChunkIndexMode is where a spec layer's chunk index goes.
type ChunkIndexMode string

const (
	ChunkIndexNone ChunkIndexMode = ""
	// ChunkIndexEmbedded appends it to the layer blob (§3.4.3).
	ChunkIndexEmbedded ChunkIndexMode = "embedded"
	// ChunkIndexStandalone makes it a layer of its own, after the one it
	// indexes: not for an image's top layer, since the spec wants an
	// EROFS layer last (§3.8).
	ChunkIndexStandalone ChunkIndexMode = "standalone"
)

// SpecOptions are the parts of the EROFS image spec's layers that
// containerd's media types have no place for; they apply with
// ImageOptions.SpecMediaTypes.
type SpecOptions struct {
	ChunkIndex ChunkIndexMode
	// ChunkSize is the chunk index's chunk (default
	// chunkindex.DefaultChunkSize).
	ChunkSize int
	// DMVerity appends a dm-verity tree to each layer's image data and
	// annotates it (§3.5).
	DMVerity bool
}

func (o SpecOptions) active() bool { return o.ChunkIndex != ChunkIndexNone || o.DMVerity }

// verityBlockSizeSpec is the spec layers' dm-verity block size: the spec
// has one for data and hash blocks, and dmverity's hash blocks are 4 KiB.
const verityBlockSizeSpec = dmverity.BlockSize

// specLayer makes fl, whose raw image is converted, a layer of the EROFS
// image spec with a dm-verity tree and a chunk index as the options ask:
// the tree is appended to the raw image (the image data, §3.1), the blob
// is the image data (one zstd frame per chunk if compressed) and the
// index after it, or the index goes in a layer of its own (fl.chunkIndex).
func (c *Converter) specLayer(fl *fileLayer) (*fileLayer, error) {
	o := c.opt.Spec
	fl.annotations = map[string]string{}
	if o.DMVerity {
		if err := appendVerity(fl); err != nil {
			return nil, err
		}
	}
	var err error
	if fl.diffID, fl.rawSize, err = hashFile(fl.raw); err != nil {
		return nil, err
	}
	fl.digest, fl.size, fl.blob = fl.diffID, fl.rawSize, fl.raw
	fl.mediaType = MediaTypeSpec
	comp := chunkindex.None
	if c.opt.LayerZstd {
		fl.mediaType, comp = MediaTypeSpecZstd, chunkindex.Zstd
	}
	if o.ChunkIndex == ChunkIndexNone {
		if c.opt.LayerZstd {
			fl.blob = fl.raw + ".zst"
			if err := zstdFile(fl.blob, fl.raw); err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			fl.digest, fl.size, err = hashFile(fl.blob)
		}
		return fl, err
	}
	embed := o.ChunkIndex == ChunkIndexEmbedded
	if !embed && comp == chunkindex.None {
		// The blob is the raw image as it is: the index is made
		// alongside, of the same bytes.
		x, _, err := writeChunked(io.Discard, fl.raw, comp, o.ChunkSize, false)
		if err != nil {
			return nil, err
		}
		return fl, c.standaloneIndex(fl, x)
	}
	fl.blob = fl.raw + ".blob"
	out, err := os.Create(fl.blob)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	x, r, err := writeChunked(bw, fl.raw, comp, o.ChunkSize, embed)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("chunk index: %w", err)
	}
	if fl.digest, fl.size, err = hashFile(fl.blob); err != nil {
		return nil, err
	}
	if !embed {
		return fl, c.standaloneIndex(fl, x)
	}
	payload, err := x.MarshalBinary()
	if err != nil {
		return nil, err
	}
	fl.annotations[chunkindex.AnnotationRange] = r.String()
	fl.annotations[chunkindex.AnnotationDigest] = chunkindex.Digest(payload)
	if comp == chunkindex.None {
		// A raw blob is its own DiffID, index and all (§5.2).
		os.Remove(fl.raw)
		fl.raw, fl.diffID, fl.rawSize = fl.blob, fl.digest, fl.size
	}
	return fl, nil
}

// appendVerity appends the dm-verity superblock and tree to fl's raw image
// and annotates where it is.
func appendVerity(fl *fileLayer) error {
	f, err := os.OpenFile(fl.raw, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	img, err := erofs.Open(f, st.Size())
	if err != nil {
		return err
	}
	if bs := img.Super().BlockSize; bs < verityBlockSizeSpec {
		return fmt.Errorf("dm-verity: the image's %d-byte blocks are smaller than the %d-byte blocks the spec's dm-verity layout hashes (its block_size is the data's and the tree's): use a block size of %d", bs, verityBlockSizeSpec, verityBlockSizeSpec)
	}
	m, err := dmverity.Format(f, st.Size(), verityBlockSizeSpec)
	if err != nil {
		return err
	}
	fl.annotations[AnnotationVerityHashOffset] = strconv.FormatUint(m.HashOffset, 10)
	fl.annotations[AnnotationVerityRootDigest] = "sha256:" + m.RootHash
	fl.annotations[AnnotationVerityBlockSize] = strconv.Itoa(verityBlockSizeSpec)
	return f.Close()
}

// writeChunked writes the image data in file raw to w as chunks, with the
// index after them if embed.
func writeChunked(w io.Writer, raw string, comp chunkindex.Compression, chunkSize int, embed bool) (*chunkindex.Index, chunkindex.Range, error) {
	in, err := os.Open(raw)
	if err != nil {
		return nil, chunkindex.Range{}, err
	}
	defer in.Close()
	cw, err := chunkindex.NewWriter(w, chunkindex.WriterOptions{Compression: comp, ChunkSize: chunkSize})
	if err != nil {
		return nil, chunkindex.Range{}, err
	}
	if _, err := io.Copy(cw, in); err != nil {
		return nil, chunkindex.Range{}, err
	}
	return cw.Finish(embed)
}

// standaloneIndex makes x the standalone chunk-index layer that follows fl.
func (c *Converter) standaloneIndex(fl *fileLayer, x *chunkindex.Index) error {
	payload, err := x.MarshalBinary()
	if err != nil {
		return err
	}
	p := fl.raw + ".chunk-index"
	if err := os.WriteFile(p, payload, 0o644); err != nil {
		return err
	}
	h, n, err := hashFile(p)
	if err != nil {
		return err
	}
	fl.chunkIndex = &fileLayer{raw: p, blob: p, diffID: h, digest: h, size: n, rawSize: n,
		mediaType: MediaTypeChunkIndex, sourceDigest: fl.sourceDigest,
		annotations: map[string]string{
			chunkindex.AnnotationTarget: fl.digest.String(),
			chunkindex.AnnotationDigest: chunkindex.Digest(payload),
		}}
	return nil
}

// chunkIndexDescriptor is the manifest's descriptor of fl's standalone
// chunk-index layer.
func chunkIndexDescriptor(ci *fileLayer) v1.Descriptor {
	return v1.Descriptor{MediaType: ci.mediaType, Digest: ci.digest, Size: ci.size, Annotations: maps.Clone(ci.annotations)}
}

package erofs

import (
	"fmt"

	"github.com/ocierofs/ocierofs/erofs/compress/lz4"
)

// Algorithm is an EROFS compression algorithm id (h_algorithmtype).
type Algorithm uint8

// The algorithms of the on-disk format.
const (
	AlgLZ4     Algorithm = 0
	AlgLZMA    Algorithm = 1 // MicroLZMA
	AlgDeflate Algorithm = 2
	AlgZstd    Algorithm = 3
)

func (a Algorithm) String() string {
	switch a {
	case AlgLZ4:
		return "lz4"
	case AlgLZMA:
		return "lzma"
	case AlgDeflate:
		return "deflate"
	case AlgZstd:
		return "zstd"
	}
	return fmt.Sprintf("algorithm %d", uint8(a))
}

// A compressor fills fixed-size physical clusters: CompressDestSize
// compresses the longest prefix of src whose compressed form fits in dst
// (len(dst) is the budget) and reports the bytes written and the bytes of
// src consumed. dst[:written] must decode, with the algorithm's EROFS
// decoder, to exactly src[:consumed], and its first byte must not be zero
// (0padding finds the stream by skipping zeros). Every Builder has its own:
// it may keep state between calls, but no history: each call is an
// independent stream.
type compressor interface {
	CompressDestSize(dst, src []byte) (written, consumed int)
	// config is the payload of the algorithm's compression configuration
	// record (erofs-format.md §7.12), for a pcluster of pclusterBlocks.
	config(pclusterBlocks int) []byte
}

// Compression makes a Builder compress regular files. Files are cut into
// extents, each compressed into a pcluster of at most PclusterSize bytes;
// a pcluster that saves no block is stored uncompressed, and a file none
// of whose pclusters saves a block is stored as an uncompressed file.
type Compression struct {
	Algorithm Algorithm
	// Level is the codec's level. LZ4: 0 is the fast greedy encoder, 1–12
	// are LZ4HC levels (mkfs.erofs -zlz4hc,N).
	Level int
	// PclusterSize is the largest physical cluster, a multiple of the block
	// size up to 1 MiB; 0 means one block. Pclusters larger than a block
	// need Linux 5.13.
	PclusterSize int
	// MaxExtent bounds the decompressed size of one extent (default and
	// maximum: see DefaultMaxExtent, MaxExtentLimit). Smaller extents make
	// random reads cheaper; larger ones compress repetitive data better.
	MaxExtent int
	// TailPacking stores the compressed last extent of a file inline after
	// its inode (ztailpacking, Linux 5.17).
	TailPacking bool
	// Fragments packs small files and the tails of larger ones together into
	// the packed inode, where they are compressed as one stream (Linux 6.1).
	Fragments bool
	// FullIndexes writes COMPRESSED_FULL indexes where the smaller COMPACT
	// form would do (tests use it to put both forms before the kernel).
	FullIndexes bool
}

const (
	// DefaultMaxExtent is the decompressed extent bound when none is set.
	DefaultMaxExtent = 1 << 20
	// MaxExtentLimit is the largest decompressed extent the kernel reads
	// (Z_EROFS_PCLUSTER_MAX_DSIZE).
	MaxExtentLimit = 12 << 20
	// MaxPclusterSize is the largest physical cluster the kernel reads.
	MaxPclusterSize = 1 << 20
)

// validate checks the compression options for block size bs.
func (c *Compression) validate(bs int) error {
	if _, err := c.newCompressor(); err != nil {
		return err
	}
	if p := c.PclusterSize; p != 0 && (p < bs || p%bs != 0 || p > MaxPclusterSize) {
		return fmt.Errorf("erofs: pcluster size %d: want a multiple of the block size %d up to %d", p, bs, MaxPclusterSize)
	}
	if m := c.MaxExtent; m != 0 && (m < bs || m > MaxExtentLimit) {
		return fmt.Errorf("erofs: max extent %d: want %d … %d bytes", m, bs, MaxExtentLimit)
	}
	return nil
}

// newCompressor makes the encoder of the options' algorithm and level.
func (c *Compression) newCompressor() (compressor, error) {
	switch c.Algorithm {
	case AlgLZ4:
		e, err := lz4.NewEncoder(c.Level)
		if err != nil {
			return nil, fmt.Errorf("erofs: %w", err)
		}
		return lz4Compressor{e}, nil
	}
	return nil, fmt.Errorf("erofs: %s compression is not supported", c.Algorithm)
}

type lz4Compressor struct{ e *lz4.Encoder }

func (c lz4Compressor) CompressDestSize(dst, src []byte) (int, int) {
	return c.e.CompressDestSize(dst, src)
}

// config is the LZ4 record: u16 max_distance, u16 max_pclusterblks, 10
// reserved bytes.
func (lz4Compressor) config(pclusterBlocks int) []byte {
	b := make([]byte, 14)
	le.PutUint16(b[0:], lz4.MaxDistance)
	le.PutUint16(b[2:], uint16(pclusterBlocks))
	return b
}

// decompressor decodes one pcluster's stream (leading zeros already
// stripped) into exactly len(dst) bytes.
type decompressor func(dst, src []byte) error

var decompressors = map[Algorithm]decompressor{
	AlgLZ4: func(dst, src []byte) error {
		n, err := lz4.Decompress(dst, src)
		if err != nil {
			return err
		}
		if n != len(dst) {
			return fmt.Errorf("lz4 stream decodes to %d bytes, the extent has %d", n, len(dst))
		}
		return nil
	},
}

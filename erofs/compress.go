package erofs

import "fmt"

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
	// Level is the codec's level (DefaultLevel, LevelRange). LZ4: 0 is the
	// fast greedy encoder, 1–12 are LZ4HC levels (mkfs.erofs -zlz4hc,N).
	Level int
	// DictSize is the history window of the codecs that have one (LZMA's
	// dictionary, zstd's window); 0 lets the codec choose from the level
	// and the pcluster size. The kernel bounds it per algorithm.
	DictSize int
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
	// Dedupe lets extents use pclusters written before them, in the same
	// file or another, when they hold the same bytes at any offset
	// (INCOMPAT_DEDUPE, Linux 6.1; files that use it get FULL indexes).
	// It reads pclusters back from the output, which must then be an
	// io.ReaderAt (an *os.File); otherwise it is off.
	Dedupe bool
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
	// maxPclusterBlocks is the most blocks a pcluster's index can count:
	// the count is 11 bits beside the CBLKCNT flag (2048 reads as 0).
	maxPclusterBlocks = 1<<11 - 1
	// maxLZ4PclusterBlocks is the most blocks Linux accepts in the lz4
	// record's max_pclusterblks: 1 MiB of pages (6.18 on 4 KiB pages
	// refuses to mount 257 blocks of 1 KiB), whatever the block size.
	maxLZ4PclusterBlocks = MaxPclusterSize / 4096
)

// validate checks the compression options for block size bs.
func (c *Compression) validate(bs int) error {
	if _, err := c.newCompressor(); err != nil {
		return err
	}
	if p := c.PclusterSize; p != 0 {
		switch n := p / bs; {
		case p < bs || p%bs != 0 || p > MaxPclusterSize:
			return fmt.Errorf("erofs: pcluster size %d: want a multiple of the block size %d up to %d", p, bs, MaxPclusterSize)
		case n > maxPclusterBlocks:
			// With blocks under 1 KiB, 1 MiB is too many for the index.
			return fmt.Errorf("erofs: pcluster size %d: %d blocks of %d bytes, and an index counts at most %d", p, n, bs, maxPclusterBlocks)
		case c.Algorithm == AlgLZ4 && n > maxLZ4PclusterBlocks:
			return fmt.Errorf("erofs: lz4 pcluster size %d: %d blocks of %d bytes; Linux reads lz4 pclusters of at most %d blocks (1 MiB of 4 KiB pages)", p, n, bs, maxLZ4PclusterBlocks)
		}
	}
	if m := c.MaxExtent; m != 0 && (m < bs || m > MaxExtentLimit) {
		return fmt.Errorf("erofs: max extent %d: want %d … %d bytes", m, bs, MaxExtentLimit)
	}
	return nil
}

// newCompressor makes the encoder of the options' algorithm and level.
func (c *Compression) newCompressor() (compressor, error) {
	k := codecs[c.Algorithm]
	if k == nil {
		return nil, fmt.Errorf("erofs: %s compression is not supported", c.Algorithm)
	}
	if c.Level < k.minLevel || c.Level > k.maxLevel {
		return nil, fmt.Errorf("erofs: %s level %d: want %d … %d", c.Algorithm, c.Level, k.minLevel, k.maxLevel)
	}
	e, err := k.newCompressor(c)
	if err != nil {
		return nil, fmt.Errorf("erofs: %s: %w", c.Algorithm, err)
	}
	return e, nil
}

// A codec is what the Builder and the reader need of one algorithm. Each
// lives in a codec_NAME.go file that registers it in codecs.
type codec struct {
	// minLevel, maxLevel and defaultLevel bound Compression.Level.
	minLevel, maxLevel, defaultLevel int
	// kernel is the first Linux version that decompresses the algorithm.
	kernel Kernel
	// newCompressor makes an encoder for the options (level, dictionary).
	newCompressor func(c *Compression) (compressor, error)
	// decompress decodes one pcluster's stream (leading zeros already
	// stripped) into exactly len(dst) bytes, as the kernel's full decoding
	// does: a stream that decodes to fewer bytes is an error.
	decompress func(dst, src []byte) error
}

var codecs = map[Algorithm]*codec{}

// DefaultLevel is the level an algorithm uses when none is asked for; ok
// is false for an algorithm this package cannot write.
func DefaultLevel(a Algorithm) (level int, ok bool) {
	k := codecs[a]
	if k == nil {
		return 0, false
	}
	return k.defaultLevel, true
}

// LevelRange is the range of levels an algorithm accepts.
func LevelRange(a Algorithm) (lo, hi int, ok bool) {
	k := codecs[a]
	if k == nil {
		return 0, 0, false
	}
	return k.minLevel, k.maxLevel, true
}

// ParseAlgorithm reads an algorithm name: lz4, lzma, deflate or zstd.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a := AlgLZ4; a <= AlgZstd; a++ {
		if a.String() == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("erofs: unknown compression algorithm %q", name)
}

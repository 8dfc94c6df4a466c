package erofs

import (
	"sync"

	"github.com/ocierofs/ocierofs/erofs/compress/lzma"
)

// LZMA (erofs-format.md §8.2): one MicroLZMA stream per pcluster, Linux 5.16
// (CONFIG_EROFS_FS_ZIP_LZMA).
//
// Levels 0–9 are xz's presets: 0–3 the fast parser, 4–9 the price-based
// optimal parser. The default is 6, xz's and mkfs.erofs' own default: LZMA
// is the codec one picks for the smallest image, and level 6 gives most of
// what 9 gives at a fraction of its time; level 1 is the fast choice
// (mkfs.erofs -zlzma,level=1 is the yardstick of the speed target).
func init() {
	codecs[AlgLZMA] = &codec{
		minLevel: lzma.LevelMin, maxLevel: lzma.LevelMax, defaultLevel: lzma.LevelDefault,
		kernel: Kernel{5, 16},
		newCompressor: func(c *Compression) (compressor, error) {
			e, err := lzma.NewEncoder(c.Level, lzma.WithDictSize(lzmaDict(c)))
			if err != nil {
				return nil, err
			}
			return lzmaCompressor{e}, nil
		},
		decompress: func(dst, src []byte) error {
			// The reader is not told the image's dictionary size, so
			// distances are checked against the largest the kernel takes.
			d := lzmaDecoders.Get().(*lzma.Decoder)
			defer lzmaDecoders.Put(d)
			return d.Decode(dst, src)
		},
	}
}

var lzmaDecoders = sync.Pool{New: func() any {
	d, _ := lzma.NewDecoder(lzma.MaxDictSize)
	return d
}}

// lzmaDict is the dictionary of the options: DictSize when set, otherwise
// eight pclusters (at least 32 KiB, as mkfs.erofs chooses) but no more than
// the level's xz preset. The kernel allocates a dictionary of this size for
// each of its decompression streams (one per CPU), and a 4 KiB pcluster
// holds only some 20–40 KiB of text, so a larger one buys nothing.
func lzmaDict(c *Compression) int {
	if d := c.DictSize; d != 0 {
		return d // NewEncoder checks the kernel's bounds
	}
	p := max(c.PclusterSize, 4096)
	return min(lzma.DefaultDictSize(c.Level), max(32<<10, 8*p))
}

type lzmaCompressor struct{ e *lzma.Encoder }

func (c lzmaCompressor) CompressDestSize(dst, src []byte) (int, int) {
	return c.e.CompressDestSize(dst, src)
}

// config is the LZMA record: u32 dict_size, u16 format (0), 8 reserved.
func (c lzmaCompressor) config(int) []byte {
	b := make([]byte, 14)
	le.PutUint32(b[0:], uint32(c.e.DictSize()))
	return b
}

package erofs

import (
	"github.com/ocierofs/ocierofs/erofs/compress/deflate"
)

// DEFLATE (erofs-format.md §8.3): one raw DEFLATE stream per pcluster whose
// final block ends exactly at the extent's end (Linux 6.6). The default
// level is 6, as in zlib and gzip, not erofs-utils' 1: whoever picks DEFLATE
// over LZ4 wants density, and level 6 makes clearly smaller images than
// level 1 on source text (about the size mkfs.erofs -zdeflate,level=6
// makes) at a moderate cost in speed; levels 7–9 add little for much more
// time. BenchmarkDestSize in erofs/compress/deflate compares the levels.
func init() {
	codecs[AlgDeflate] = &codec{
		minLevel: deflate.LevelMin, maxLevel: deflate.LevelMax, defaultLevel: deflate.LevelDefault,
		kernel: Kernel{6, 6},
		newCompressor: func(c *Compression) (compressor, error) {
			e, err := deflate.NewEncoder(c.Level)
			if err != nil {
				return nil, err
			}
			return deflateCompressor{e}, nil
		},
		decompress: deflate.Decompress,
	}
}

type deflateCompressor struct{ e *deflate.Encoder }

func (c deflateCompressor) CompressDestSize(dst, src []byte) (int, int) {
	return c.e.CompressDestSize(dst, src)
}

// config is the DEFLATE record: u8 windowbits, 5 reserved bytes. The
// encoder's matches reach at most 32 KiB back.
func (deflateCompressor) config(int) []byte {
	b := make([]byte, 6)
	b[0] = deflate.WindowBits
	return b
}

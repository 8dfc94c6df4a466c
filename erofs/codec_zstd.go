package erofs

import (
	"fmt"
	"math/bits"

	"github.com/ocierofs/ocierofs/erofs/compress/zstd"
)

// Zstandard (erofs-format.md §8.4): one zstd frame per pcluster, Linux 6.10.
//
// The default level is 3, the default of zstd and of mkfs.erofs: it is the
// first level with hash chains and lazy matching, and writes noticeably
// less than level 1 (and less than mkfs.erofs at level 3) at a fraction of
// level 1's speed, still faster than mkfs.erofs. Level 1 is the fast
// choice. BenchmarkExtents in erofs/compress/zstd compares the levels.
func init() {
	codecs[AlgZstd] = &codec{
		minLevel: zstd.MinLevel, maxLevel: zstd.MaxLevel, defaultLevel: zstd.DefaultLevel,
		kernel: Kernel{6, 10},
		newCompressor: func(c *Compression) (compressor, error) {
			w, err := zstdWindow(c)
			if err != nil {
				return nil, err
			}
			e, err := zstd.NewEncoder(c.Level, zstd.WithWindow(w))
			if err != nil {
				return nil, err
			}
			return zstdCompressor{e}, nil
		},
		decompress: zstd.Decompress,
	}
}

// zstdWindow is the window of the options: DictSize rounded up to a power
// of two, or, when unset, sixteen pclusters (a 4 KiB pcluster holds about
// 20–40 KiB of text, so matches rarely reach further) between 64 KiB and
// the kernel's 1 MiB. A smaller window is a smaller kernel workspace: the
// kernel sizes its per-stream decoder memory by the configured window.
func zstdWindow(c *Compression) (int, error) {
	if d := c.DictSize; d != 0 {
		if d < 0 || d > zstd.MaxWindow {
			return 0, fmt.Errorf("window %d: want at most %d bytes", d, zstd.MaxWindow)
		}
		return max(zstd.MinWindow, 1<<bits.Len(uint(d-1))), nil
	}
	p := max(c.PclusterSize, 4096)
	return min(zstd.MaxWindow, max(64<<10, 1<<bits.Len(uint(16*p-1)))), nil
}

type zstdCompressor struct{ e *zstd.Encoder }

func (c zstdCompressor) CompressDestSize(dst, src []byte) (int, int) {
	return c.e.CompressDestSize(dst, src)
}

// config is the zstd record: u8 format (0), u8 windowlog-10, 4 reserved.
func (c zstdCompressor) config(int) []byte {
	b := make([]byte, 6)
	b[1] = uint8(c.e.WindowLog() - 10)
	return b
}

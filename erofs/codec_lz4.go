package erofs

import (
	"fmt"

	"github.com/ocierofs/ocierofs/erofs/compress/lz4"
)

// LZ4 (erofs-format.md §8.1): one raw LZ4 block per pcluster. Level 0 is
// the fast greedy encoder, 1–12 are LZ4HC levels (mkfs.erofs -zlz4hc,N).
func init() {
	codecs[AlgLZ4] = &codec{
		minLevel: lz4.LevelFast, maxLevel: lz4.LevelMax, defaultLevel: lz4.LevelFast,
		kernel: Kernel{5, 4},
		newCompressor: func(c *Compression) (compressor, error) {
			e, err := lz4.NewEncoder(c.Level)
			if err != nil {
				return nil, err
			}
			return lz4Compressor{e}, nil
		},
		decompress: func(dst, src []byte) error {
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

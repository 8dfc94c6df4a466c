package zstd

import (
	"fmt"
	"sync"

	kzstd "github.com/klauspost/compress/zstd"
)

// maxDecoded bounds what one frame may decode to (EROFS extents are at
// most 12 MiB), so a hostile frame header cannot make the decoder reserve
// more memory than a pcluster can need.
const maxDecoded = 16 << 20

var (
	decOnce sync.Once
	dec     *kzstd.Decoder
	decErr  error
)

// decoder is shared by every caller: klauspost's DecodeAll is safe for
// concurrent use and keeps a pool of block decoders (one per GOMAXPROCS).
func decoder() (*kzstd.Decoder, error) {
	decOnce.Do(func() {
		dec, decErr = kzstd.NewReader(nil,
			kzstd.WithDecoderConcurrency(0),
			kzstd.WithDecoderLowmem(true),
			kzstd.WithDecoderMaxWindow(MaxWindow),
			kzstd.WithDecoderMaxMemory(maxDecoded),
			kzstd.IgnoreChecksum(false))
	})
	return dec, decErr
}

// Decompress decodes the zstd frame in src into exactly len(dst) bytes, as
// the kernel's full decoding of a pcluster does. A frame that decodes to
// fewer or more bytes, a window over MaxWindow, trailing data after the
// frame or any corruption is an error; garbage never panics.
func Decompress(dst, src []byte) error {
	d, err := decoder()
	if err != nil {
		return fmt.Errorf("zstd: decoder: %w", err)
	}
	out, err := d.DecodeAll(src, dst[:0])
	if err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	if len(out) != len(dst) {
		return fmt.Errorf("zstd: frame decodes to %d bytes, want %d", len(out), len(dst))
	}
	if len(out) > 0 && &out[0] != &dst[0] {
		// DecodeAll grew a new slice: only possible when it wrote more
		// than cap(dst), which the length check above already rejects
		// unless cap(dst) > len(dst); copy to be exact either way.
		copy(dst, out)
	}
	return nil
}

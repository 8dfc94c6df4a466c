// Package zstd is the Zstandard codec of EROFS pclusters: an encoder that
// fills a fixed output budget with one standard zstd frame (the "destSize"
// mode EROFS needs) and a strict frame decoder.
//
// An EROFS writer hands the remaining extent data and one pcluster's worth
// of output to CompressDestSize, which compresses the longest prefix that
// fits and reports how much input it used:
//
//	enc, _ := zstd.NewEncoder(1, zstd.WithWindow(128<<10))
//	n, used := enc.CompressDestSize(pcluster[:4096], data)
//	// pcluster[:n] is one zstd frame that decodes to data[:used].
//	err := zstd.Decompress(out[:used], pcluster[:n])
//
// Frames carry a Window_Descriptor (never a content size or checksum), so
// the window the kernel checks against its configuration record is the
// one the encoder was made with (WindowLog), whatever the extent length.
package zstd

import (
	"fmt"
	"math/bits"
)

// Window bounds. The kernel reads windows up to 1 MiB (its configuration
// record stores windowlog-10 in four bits it caps at 10).
const (
	MinWindow     = 1 << 10
	MaxWindow     = 1 << 20
	DefaultWindow = 1 << 17
)

// Levels accepted by NewEncoder, as zstd numbers them.
const (
	MinLevel     = 1
	MaxLevel     = 22
	DefaultLevel = 3
)

// An Option configures an Encoder.
type Option func(*Encoder) error

// WithWindow sets the largest match distance, written into every frame as
// its window size: a power of two from MinWindow to MaxWindow.
func WithWindow(size int) Option {
	return func(e *Encoder) error {
		if size < MinWindow || size > MaxWindow || size&(size-1) != 0 {
			return fmt.Errorf("zstd: window %d: want a power of two from %d to %d", size, MinWindow, MaxWindow)
		}
		e.windowLog = uint8(bits.TrailingZeros(uint(size)))
		return nil
	}
}

// An Encoder compresses independent frames; it is not safe for concurrent
// use. Its tables are reused between calls, but no history is: every frame
// stands alone.
type Encoder struct {
	level     int
	windowLog uint8
	search    *searchEncoder
}

// NewEncoder makes an encoder for a zstd level (MinLevel … MaxLevel).
func NewEncoder(level int, opts ...Option) (*Encoder, error) {
	if level < MinLevel || level > MaxLevel {
		return nil, fmt.Errorf("zstd: level %d: want %d … %d", level, MinLevel, MaxLevel)
	}
	e := &Encoder{level: level, windowLog: uint8(bits.TrailingZeros(DefaultWindow))}
	for _, o := range opts {
		if err := o(e); err != nil {
			return nil, err
		}
	}
	s, err := newSearchEncoder(level, 1<<e.windowLog)
	if err != nil {
		return nil, err
	}
	e.search = s
	return e, nil
}

// Level is the encoder's zstd level.
func (e *Encoder) Level() int { return e.level }

// WindowLog is log2 of the window every frame declares (10 … 20); an EROFS
// writer stores WindowLog()-10 in the zstd configuration record.
func (e *Encoder) WindowLog() int { return int(e.windowLog) }

// CompressDestSize compresses the longest prefix of src it can fit into
// dst and returns the frame length and the prefix length. dst[:written] is
// one zstd frame that decodes to exactly src[:consumed]; consumed is 0
// (and written 0) when not even one byte fits.
func (e *Encoder) CompressDestSize(dst, src []byte) (written, consumed int) {
	return e.search.compress(dst, src)
}

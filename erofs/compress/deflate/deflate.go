// Package deflate is the DEFLATE codec of EROFS pclusters.
package deflate

import (
	"fmt"

	"github.com/klauspost/compress/flate"
)

// Compression levels accepted by NewEncoder.
const (
	LevelMin     = 1
	LevelDefault = 6
	LevelMax     = 9
)

// WindowBits is log2 of the largest match distance the encoder emits.
const WindowBits = 15

// Option changes an Encoder's behaviour.
type Option func(*Encoder) error

// Encoder fills fixed-size outputs with raw DEFLATE streams.
type Encoder struct {
	level int
	w     *flate.Writer
	buf   sliceWriter
	ratio float64
}

type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

// NewEncoder returns an encoder at level 1 … 9.
func NewEncoder(level int, opts ...Option) (*Encoder, error) {
	if level < LevelMin || level > LevelMax {
		return nil, fmt.Errorf("deflate: level %d out of range %d..%d", level, LevelMin, LevelMax)
	}
	e := &Encoder{level: level}
	for _, o := range opts {
		if err := o(e); err != nil {
			return nil, err
		}
	}
	w, err := flate.NewWriter(&e.buf, level)
	if err != nil {
		return nil, err
	}
	e.w = w
	return e, nil
}

func (e *Encoder) try(src []byte) int {
	e.buf.b = e.buf.b[:0]
	e.w.Reset(&e.buf)
	e.w.Write(src)
	e.w.Close()
	return len(e.buf.b)
}

// CompressDestSize compresses the longest prefix of src whose compressed
// form fits in dst.
func (e *Encoder) CompressDestSize(dst, src []byte) (written, consumed int) {
	budget := len(dst)
	lo, hi := 0, len(src) // lo fits, hi+1 does not
	best := 0
	if e.try(src) <= budget {
		lo = len(src)
	} else {
		for lo < hi {
			m := (lo + hi + 1) / 2
			if e.try(src[:m]) <= budget {
				lo = m
			} else {
				hi = m - 1
			}
		}
	}
	if lo == 0 {
		return 0, 0
	}
	best = e.try(src[:lo])
	copy(dst, e.buf.b[:best])
	if dst[0] == 0 {
		dst[0] |= 8
	}
	return best, lo
}

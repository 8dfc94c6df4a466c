package zstd

import (
	kzstd "github.com/klauspost/compress/zstd"
)

// searchEncoder fills a budget the way erofs-utils does with libzstd:
// whole candidate prefixes are compressed as complete frames and the
// longest that fits is kept. Each probe is a full encode, so it is slow;
// it stays as the reference the block writer is measured against.
type searchEncoder struct {
	enc     *kzstd.Encoder
	scratch []byte
	guess   float64 // first probe: input bytes per output byte
}

func newSearchEncoder(level, window int) (*searchEncoder, error) {
	enc, err := kzstd.NewWriter(nil,
		kzstd.WithEncoderLevel(kzstd.EncoderLevelFromZstd(level)),
		kzstd.WithWindowSize(window),
		kzstd.WithEncoderCRC(false),
		kzstd.WithEncoderConcurrency(1),
		kzstd.WithSingleSegment(false),
		kzstd.WithZeroFrames(true))
	if err != nil {
		return nil, err
	}
	return &searchEncoder{enc: enc, guess: 4}, nil
}

func (s *searchEncoder) CompressDestSize(dst, src []byte) (int, int) {
	budget := len(dst)
	if budget < 16 || len(src) == 0 {
		return 0, 0
	}
	try := func(m int) int {
		s.scratch = s.enc.EncodeAll(src[:m], s.scratch[:0])
		return len(s.scratch)
	}
	if n := try(len(src)); n <= budget {
		copy(dst, s.scratch)
		return n, len(src)
	}
	// lo fits (with loN bytes), hi does not.
	lo, loN, hi := 0, 0, len(src)
	m := min(int(float64(budget)*s.guess), len(src)-1)
	for hi-lo > 1 {
		m = max(min(m, hi-1), lo+1)
		n := try(m)
		if n <= budget {
			lo, loN = m, n
			copy(dst, s.scratch)
			if budget-n <= 1 {
				break
			}
			// Scale by the room left, but move at least a little.
			m = m + max((budget-n)*m/max(n, 1), 1)
		} else {
			hi = m
			m = lo + (hi-lo)/2
		}
	}
	return loN, lo
}

// Package lz4 is the LZ4 codec of EROFS pclusters: a raw LZ4 block encoder
// that fills a fixed output budget (the "destSize" mode EROFS needs) and a
// bounds-checked block decoder.
//
// An EROFS writer hands the remaining file data and one pcluster's worth of
// output to CompressDestSize, which compresses the longest prefix that fits in
// a single pass and reports how much input it used:
//
//	enc, _ := lz4.NewEncoder(lz4.LevelFast)
//	n, used := enc.CompressDestSize(pcluster[:4096], data)
//	// pcluster[:n] decodes to data[:used]; advance data by used.
//	m, err := lz4.Decompress(out[:used], pcluster[:n])
//
// Blocks follow the LZ4 block format with its end-of-block rules, so the
// Linux kernel's LZ4_decompress_safe(_partial) accepts them: the final
// sequence carries literals only, the last 5 bytes are literals and no match
// starts in the last 12 bytes of the consumed input. Match offsets are 1 to
// MaxDistance. The first byte of a non-empty block is never zero (the first
// sequence always has a literal), as EROFS 0padding requires: the kernel finds
// the start of a right-aligned block by skipping leading zero bytes.
//
// Levels:
//
//   - LevelFast (0): greedy parser with one hash table of 5-byte sequences,
//     like LZ4_compress_fast. After 32 positions without a match the search
//     step grows by one byte every 32 probes, so incompressible input is
//     crossed quickly; WithAcceleration starts the step higher.
//   - Levels 1–9: hash chains of 4-byte sequences searched to a depth that
//     grows with the level (levels 1 and 2: 2 candidates, level 3: 4 …
//     level 9: 256, as in C's LZ4HC), ending early at a match of 32–256
//     bytes. As in LZ4HC, the candidates near the end of each match are
//     searched for a longer one that starts inside it, which then cuts it
//     short or replaces it. Levels 1–9 also speed up through long runs
//     without matches.
//   - Levels 10–12: price-based optimal parsing over the same hash chains
//     (every position searched, every match length considered), with search
//     depths 64, 256 and 4096 and parse windows of 512, 1024 and 4096 bytes.
package lz4

import (
	"errors"
	"fmt"
)

// Compression levels accepted by NewEncoder.
const (
	LevelFast = 0  // greedy hash-table parser, the fastest
	LevelHC   = 9  // deepest hash-chain level with lazy matching
	LevelMax  = 12 // optimal parser with the deepest search
)

// MaxDistance is the largest match offset the encoder emits. An EROFS writer
// records it as the superblock's LZ4 max_distance.
const MaxDistance = 65535

const (
	minMatch     = 4
	lastLiterals = 5  // a block ends with at least this many literals
	mfLimit      = 12 // no match starts within this many bytes of the block end
	// endReserve is the output kept free after every sequence so that the
	// block can always be closed by a token and 8 literals. Those put the
	// last match (at least 4 bytes) 12 bytes or more before the end of the
	// consumed input, and its end 8 bytes or more before it.
	endReserve = 1 + 8
	// seqReserve is what a sequence needs beyond its token and literals: the
	// offset and endReserve.
	seqReserve = 2 + endReserve
)

// Option changes an Encoder's behaviour.
type Option func(*Encoder) error

// WithAcceleration makes LevelFast skip faster through data without matches,
// trading ratio for speed like LZ4_compress_fast's acceleration (1, the
// default, is the best ratio). It has no effect on the other levels.
func WithAcceleration(a int) Option {
	return func(e *Encoder) error {
		if a < 1 || a > 1<<16 {
			return fmt.Errorf("lz4: acceleration %d out of range 1..65536", a)
		}
		e.accel = a
		return nil
	}
}

// Encoder compresses into a fixed output budget. It keeps its match-finder
// tables between calls, so reuse one Encoder per goroutine: after NewEncoder,
// CompressDestSize allocates nothing. Calls are independent: no history is
// carried from one block to the next. An Encoder is not safe for concurrent
// use.
type Encoder struct {
	level int
	accel int
	// off biases the positions stored in the tables: entries written by
	// earlier calls appear more than MaxDistance behind every position of
	// this call, which saves clearing the tables for each block.
	off  int
	fast *fastTable
	hc   *hcState
}

// NewEncoder returns an Encoder for level 0 (LevelFast) to 12 (LevelMax).
func NewEncoder(level int, opts ...Option) (*Encoder, error) {
	if level < LevelFast || level > LevelMax {
		return nil, fmt.Errorf("lz4: level %d out of range %d..%d", level, LevelFast, LevelMax)
	}
	e := &Encoder{level: level, accel: 1, off: tableBias}
	for _, o := range opts {
		if err := o(e); err != nil {
			return nil, err
		}
	}
	if level == LevelFast {
		e.fast = new(fastTable)
	} else {
		e.hc = newHCState(level)
	}
	return e, nil
}

// Level reports the encoder's compression level.
func (e *Encoder) Level() int { return e.level }

// tableBias is the first bias: zeroed table entries must look far away.
const tableBias = MaxDistance + 1

// maxBias bounds the bias so that biased positions fit in uint32.
const maxBias = 1 << 31

// maxInput bounds the input one call looks at.
const maxInput = 1 << 30

// CompressDestSize compresses the longest prefix of src whose LZ4 block fits
// in dst; len(dst) is the budget. It returns the number of bytes written to
// dst and the number of bytes of src consumed: dst[:written] is one LZ4 block
// that decodes to exactly src[:consumed]. It works in one pass that stops at
// the budget. When nothing can be consumed (empty src, or a budget under 2
// bytes) it returns 0, 0. Bytes of dst past written may be overwritten.
//
// Compressible input fills the budget to within a byte or two unless all of
// src is consumed. On incompressible input consumed is about
// len(dst) - len(dst)/255 - 1; it is for the caller to store such data
// plainly when compression does not save a block.
func (e *Encoder) CompressDestSize(dst, src []byte) (written, consumed int) {
	if len(src) == 0 || len(dst) < 2 {
		return 0, 0
	}
	// An output byte stands for at most 255 input bytes, so input beyond
	// this bound cannot be consumed.
	if limit := len(dst)*255 + 64; len(src) > limit {
		src = src[:limit]
	}
	if len(src) > maxInput {
		src = src[:maxInput]
	}
	if uint64(e.off)+uint64(len(src)) >= maxBias { // uint64: the bound overflows a 32-bit int
		e.resetTables()
	}
	switch {
	case e.level == LevelFast:
		written, consumed = e.compressFast(dst, src)
	case e.level >= optMinLevel:
		written, consumed = e.compressOpt(dst, src)
	default:
		written, consumed = e.compressHC(dst, src)
	}
	e.off += len(src) + MaxDistance + 1
	return written, consumed
}

func (e *Encoder) resetTables() {
	e.off = tableBias
	if e.hc != nil {
		clear(e.hc.head[:])
	}
}

// extBytes is the number of length-extension bytes a 4-bit length field
// needs for the value v (literal length, or match length minus minMatch).
func extBytes(v int) int {
	if v < 15 {
		return 0
	}
	return (v-15)/255 + 1
}

// maxLiterals is the longest literal run whose token, length bytes and
// literals fit in avail bytes; -1 if not even a token fits.
func maxLiterals(avail int) int {
	// The longest l with l + extBytes(l) <= a, a = avail-1; extBytes(l) is
	// (l+240)/255 for every l >= 0, which solves to the expression below
	// (TestMaxLiterals checks it against a search).
	a := avail - 1
	if a < 0 {
		return -1
	}
	return a - (a+241)>>8
}

// maxMatchLen is the longest match whose length bytes fit in room bytes.
func maxMatchLen(room int) int { return minMatch + 14 + 255*room }

// putExt writes the length-extension bytes of v (>= 15) at dst[di:].
func putExt(dst []byte, di, v int) int {
	v -= 15
	for v >= 255 {
		dst[di] = 255
		di++
		v -= 255
	}
	dst[di] = byte(v)
	return di + 1
}

// finish closes the block at dst[:di] with a literals-only sequence starting
// at src[anchor:], as long as the budget allows.
func finish(dst []byte, di int, src []byte, anchor int) (written, consumed int) {
	n := min(len(src)-anchor, maxLiterals(len(dst)-di))
	if n < 0 {
		n = 0
	}
	if anchor+n == 0 {
		return 0, 0
	}
	if n < 15 {
		dst[di] = byte(n << 4)
		di++
	} else {
		dst[di] = 0xF0
		di = putExt(dst, di+1, n)
	}
	di += copy(dst[di:], src[anchor:anchor+n])
	return di, anchor + n
}

// emitSeq writes the sequence of src[anchor:ip] as literals and a match of
// length ml at distance offset, if it fits the budget with room to close the
// block afterwards. A match whose length bytes do not fit is shortened, and
// full reports it: the block should be closed then. ok is false when the
// sequence does not fit at all; nothing is written then.
func emitSeq(dst []byte, di int, src []byte, anchor, ip, offset, ml int) (ndi, end int, ok, full bool) {
	lits := ip - anchor
	if mc := ml - minMatch; lits < 15 && mc < 15 && di+26 <= len(dst) && anchor+16 <= len(src) {
		// A short sequence with room to spare (its 3 to 17 bytes and
		// seqReserve after them): the token, 16 bytes from anchor
		// whatever the run's length (one move instead of a
		// variable-length copy) and the offset, all in dst[di:di+17].
		d := (*[17]byte)(dst[di : di+17])
		d[0] = byte(lits<<4 | mc)
		*(*[16]byte)(d[1:]) = *(*[16]byte)(src[anchor : anchor+16])
		d[lits+1] = byte(offset)
		d[lits+2] = byte(offset >> 8)
		return di + 3 + lits, ip + ml, true, false
	}
	room := len(dst) - di - (1 + lits + extBytes(lits) + seqReserve)
	if room < 0 {
		return di, anchor, false, true
	}
	if ml-minMatch >= 15 && extBytes(ml-minMatch) > room {
		ml = maxMatchLen(room)
		full = true
	}
	tok := di
	if lits < 15 {
		dst[di] = byte(lits << 4)
		di++
	} else {
		dst[di] = 0xF0
		di = putExt(dst, di+1, lits)
	}
	di += copy(dst[di:], src[anchor:ip])
	dst[di] = byte(offset)
	dst[di+1] = byte(offset >> 8)
	di += 2
	if mc := ml - minMatch; mc < 15 {
		dst[tok] |= byte(mc)
	} else {
		dst[tok] |= 0x0F
		di = putExt(dst, di, mc)
	}
	return di, ip + ml, true, full
}

// Errors returned by the decoder.
var (
	ErrCorrupt  = errors.New("lz4: corrupt block")
	ErrShortDst = errors.New("lz4: block decodes to more than the output buffer")
)

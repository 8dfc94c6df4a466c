// Package lzma is the MicroLZMA codec of EROFS pclusters: an LZMA1 encoder
// that fills a fixed output budget and stops there by itself, and the
// matching decoder with the Linux kernel's exact-mode checks.
//
// An EROFS writer hands the remaining file data and one pcluster's worth of
// output to CompressDestSize, which compresses the longest prefix that fits
// and reports how much input it used:
//
//	enc, _ := lzma.NewEncoder(6)
//	n, used := enc.CompressDestSize(pcluster[:4096], data)
//	// pcluster[:n] decodes to data[:used]; advance data by used.
//	dec, _ := lzma.NewDecoder(enc.DictSize())
//	err := dec.Decode(out[:used], pcluster[:n])
//
// MicroLZMA (erofs-format.md §8.2) is a raw LZMA1 range-coder stream with
// no header and no end marker, whose first byte (always 0 in LZMA) holds the
// complement of the properties byte; the sizes and the dictionary size are
// known to the filesystem. The encoder writes lc=3 lp=0 pb=2, so streams
// start with 0xA2 and are never mistaken for 0padding.
//
// The budget is met exactly, without retries: the range coder's flushed
// length is known after every symbol, so the encoder codes symbols until the
// next one would not fit with the 4-byte flush, and flushes. Near the budget
// each candidate symbol is first run through a model of the coder's range
// that counts its bytes without changing anything (see sim), which is the
// same as coding it and rolling it back.
//
// Levels follow xz's presets:
//
//   - 0–3: fast parse (xz's "fast" mode): hash chains of 4-byte sequences
//     searched 4, 8, 24 and 48 deep, a head of 3-byte sequences (no
//     2-byte matches, and 3-byte ones only within 256 bytes: farther ones
//     cost more than literals), repeated distances tried first, a match
//     deferred by one byte when the next position has a clearly better one.
//   - 4–9: price-based optimal parse (xz's "normal" mode): every position's
//     matches are priced with the adaptive model and the cheapest path of
//     literals, matches, repeated matches and short reps is chosen; nice
//     lengths 16, 32, 64, 96, 128, 192 and search depths 16 … 128. (xz's
//     presets 7–9 differ from 6 only in dictionary size, which a pcluster
//     of a few hundred KiB does not use; here they search harder instead,
//     for little gain on source text.)
//
// Incompressible input is detected early: if the stream is not smaller than
// its input at 1, 2, 3 or 4 KiB of input or at any later 4 KiB mark, the
// encoder stops there, since such a pcluster is stored plain anyway (the
// EROFS writer then stores one block plain and tries again after it).
package lzma

import (
	"errors"
	"fmt"
)

// Dictionary size bounds of EROFS (the kernel refuses others).
const (
	MinDictSize = 4096
	MaxDictSize = 8 << 20
)

// Levels accepted by NewEncoder.
const (
	LevelMin     = 0
	LevelDefault = 6
	LevelMax     = 9
)

const numReps = 4

// levelParams are a level's parser and match-finder settings.
type levelParams struct {
	optimal bool
	depth   int // chain candidates searched per position
	nice    int // a match this long is taken without looking further
	dict    int // xz's dictionary size for the preset, capped at MaxDictSize
}

var levels = [LevelMax + 1]levelParams{
	{false, 4, 128, 256 << 10},
	{false, 8, 128, 1 << 20},
	{false, 24, 273, 2 << 20},
	{false, 48, 273, 4 << 20},
	{true, 16, 16, 4 << 20},
	{true, 24, 32, 8 << 20},
	{true, 48, 64, 8 << 20},
	{true, 64, 96, 8 << 20},
	{true, 96, 128, 8 << 20},
	{true, 128, 192, 8 << 20},
}

// Encoder is a MicroLZMA encoder. It keeps its tables between calls (no
// history: every call is an independent stream) and allocates nothing after
// the first calls. An Encoder is not safe for concurrent use.
type Encoder struct {
	lv     levelParams
	dict   int
	pbMask uint32

	p      probs
	rc     rangeEncoder
	state  uint32
	reps   [numReps]uint32
	src    []byte
	budget int

	mf hashChain
	ms [2][matchLenMax + 2]match
	op *optimum // optimal parse state (levels 4–9)
}

// Option changes an Encoder's settings.
type Option func(*Encoder) error

// WithDictSize sets the dictionary size: no match reaches further back. It
// must be MinDictSize … MaxDictSize; the default is xz's for the level
// (256 KiB at level 0 … 8 MiB from level 5), and an EROFS writer records
// DictSize in the image's configuration.
func WithDictSize(n int) Option {
	return func(e *Encoder) error {
		if n < MinDictSize || n > MaxDictSize {
			return fmt.Errorf("lzma: dictionary size %d: want %d … %d", n, MinDictSize, MaxDictSize)
		}
		e.dict = n
		return nil
	}
}

// NewEncoder returns an encoder for level 0 (fastest) … 9 (densest).
func NewEncoder(level int, opts ...Option) (*Encoder, error) {
	if level < LevelMin || level > LevelMax {
		return nil, fmt.Errorf("lzma: level %d: want %d … %d", level, LevelMin, LevelMax)
	}
	e := &Encoder{lv: levels[level], pbMask: 1<<encPB - 1}
	e.dict = e.lv.dict
	for _, o := range opts {
		if err := o(e); err != nil {
			return nil, err
		}
	}
	e.mf.init(e.dict, e.lv.depth, e.lv.nice)
	if e.lv.optimal {
		e.op = new(optimum)
	}
	return e, nil
}

// DefaultDictSize is the dictionary a level uses without WithDictSize: xz's
// preset dictionary, capped at MaxDictSize.
func DefaultDictSize(level int) int {
	if level < LevelMin || level > LevelMax {
		return MaxDictSize
	}
	return levels[level].dict
}

// DictSize is the dictionary size the encoder's streams need.
func (e *Encoder) DictSize() int { return e.dict }

// Props is the LZMA properties byte of the streams (lc 3, lp 0, pb 2); a
// stream's first byte is its complement.
const Props = encProps

// minStream is the shortest stream: the first byte, four more flushed
// bytes, and room for one literal.
const minStream = 6

// CompressDestSize compresses the longest prefix of src whose MicroLZMA
// stream fits in dst (len(dst) is the budget) and returns the stream's
// length and the bytes of src it holds. consumed is 0 when nothing fits
// (and for empty src); the stream then is meaningless. Input that does not
// compress may be cut short at a 1 KiB mark (see the package comment).
func (e *Encoder) CompressDestSize(dst, src []byte) (written, consumed int) {
	if len(src) == 0 || len(dst) < minStream {
		return 0, 0
	}
	// Positions are 32-bit; a pcluster never holds more than a few MiB.
	src = src[:min(len(src), 1<<30)]
	e.src = src
	e.budget = len(dst)
	e.rc.reset(dst)
	e.p.reset(1 << (encLC + encLP))
	e.state = 0
	e.reps = [numReps]uint32{}
	e.mf.budget = e.budget
	e.mf.reset(src)
	var pos int
	if e.lv.optimal {
		pos = e.parseOptimal()
	} else {
		pos = e.parseFast()
	}
	e.mf.done()
	e.src = nil
	if pos == 0 {
		return 0, 0
	}
	e.rc.flush()
	dst[0] = ^byte(encProps)
	return e.rc.n, pos
}

// incompressible reports whether the stream so far is no smaller than the
// input it holds. It is checked at 1, 2, 3 and 4 KiB of input and then at
// every 4 KiB: random data is caught after 1 KiB, while text is already
// smaller than its input there even without history.
func (e *Encoder) incompressible(pos int) bool {
	return e.rc.size() >= pos
}

const checkFirst = 1024

func nextCheck(c int) int {
	if c < 4096 {
		return c + 1024
	}
	return c + 4096
}

// ErrCorrupt is returned for a stream that is not valid MicroLZMA for the
// sizes given.
var ErrCorrupt = errors.New("lzma: corrupt MicroLZMA stream")

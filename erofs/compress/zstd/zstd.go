// Package zstd is the Zstandard codec of EROFS pclusters: an encoder that
// fills a fixed output budget with one standard zstd frame (the "destSize"
// mode EROFS needs, which libzstd and klauspost/compress lack) and a strict
// frame decoder.
//
// An EROFS writer hands the remaining extent data and one pcluster's worth
// of output to CompressDestSize, which compresses the longest prefix that
// fits and reports how much input it used:
//
//	enc, _ := zstd.NewEncoder(1, zstd.WithWindow(64<<10))
//	n, used := enc.CompressDestSize(pcluster[:4096], data)
//	// pcluster[:n] is one zstd frame that decodes to data[:used].
//	err := zstd.Decompress(out[:used], pcluster[:n])
//
// The encoder is its own block writer. A parser (fast.go for levels 1–2,
// chain.go above) turns input into sequences; a cost model priced from
// the block's own statistics picks the cut where the budget runs out; the
// block is then written exactly — literals Huffman-coded (huff.go: a
// table builder made for a few KiB of literals), sequences with FSE
// tables (predefined or the block's own, whichever is cheaper) — and
// checked against the budget, the cut moved if it does not fit (about
// one block in a hundred), and output left over filled with more
// literals. The input is parsed once and compressed about
// 1.1 times, where a search over prefix lengths compresses it 10 or more
// times. Incompressible input is seen from its first budget's worth and
// stored as raw blocks. A block whose input fits the budget even raw (a
// small file) skips the cost model: it is parsed to its end and encoded
// once.
//
// Frames carry a Window_Descriptor (never a content size or checksum), so
// the window the kernel checks against its configuration record is the
// one the encoder was made with (WindowLog), whatever the extent length.
// Blocks are at most 128 KiB of input; a frame holds as many as the budget
// takes, all but the last whole.
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
// stands alone, and the same input always gives the same frame.
type Encoder struct {
	level     int
	windowLog uint8
	window    int // 1 << windowLog: the largest match distance
	blockMax  int // largest block content: min(window, 128 KiB)
	p         params

	hash      hashTable  // fast parser; its gen also serves the chains
	chain     chainTable // chain parser
	chainNext int        // chain parser: first position not in the chains

	// Parse state of the current block: sequences and their literals up
	// to anchor, the next position to search (ip), the furthest position
	// parsed in this frame and the parser's own repeat offsets.
	seqs   []seq
	lits   []byte
	ip     int
	anchor int
	parsed int
	frep   [2]int
	hist   codeHist // codes of e.seqs

	cost  costModel
	sc    seqCoder
	huff  huffEnc
	tlits []byte // literals of the candidate block
	litB  []byte // literals section being tried
	seqB  []byte // sequences section being tried
}

// params are the parser settings of a level.
type params struct {
	hashLog   uint // chain parser (the fast one has fastLog)
	stepShift uint // the search step grows by one every 1<<stepShift bytes without a match

	// Chain parser (depth > 0): chain length, positions searched per
	// chain, bytes looked ahead for a better match.
	chainLog  uint
	depth     int
	lazySteps int
}

// levelParams maps zstd levels onto the parsers. Level 1 compresses a
// little better than libzstd's level 1 at 4 KiB pclusters (the one-byte
// lazy step costs a little time and saves more output on source code:
// fewer, longer matches). Levels 3 and up search hash chains
// deeper with the level; levels above 18 search as deep as 18 (there is
// no optimal parser).
func levelParams(level int) params {
	switch {
	case level <= 1:
		return params{stepShift: 5}
	case level == 2:
		return params{stepShift: 7}
	}
	depth := []int{3: 4, 4: 6, 5: 8, 6: 12, 7: 16, 8: 24, 9: 32, 10: 48, 11: 64,
		12: 96, 13: 128, 14: 192, 15: 256, 16: 384, 17: 512, 18: 1024}[min(level, 18)]
	p := params{hashLog: 16, chainLog: 16, stepShift: 7, depth: depth, lazySteps: 1}
	if level >= 6 {
		p.hashLog, p.chainLog, p.stepShift, p.lazySteps = 17, 17, 8, 2
	}
	return p
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
	e.window = 1 << e.windowLog
	e.blockMax = min(e.window, maxBlock)
	e.p = levelParams(level)
	e.hash.gen = 1
	if e.p.depth > 0 {
		e.chain.init(e.p.hashLog, e.p.chainLog)
	} else {
		e.hash.init()
	}
	return e, nil
}

// Level is the encoder's zstd level.
func (e *Encoder) Level() int { return e.level }

// WindowLog is log2 of the window every frame declares (10 … 20); an EROFS
// writer stores WindowLog()-10 in the zstd configuration record.
func (e *Encoder) WindowLog() int { return int(e.windowLog) }

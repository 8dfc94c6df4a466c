// Package deflate is the DEFLATE codec of EROFS pclusters: a raw DEFLATE
// (RFC 1951) encoder that fills a fixed output budget in one pass, and a
// decoder that checks a stream decodes to exactly the expected size.
//
// An EROFS writer hands the remaining file data and one pcluster's worth of
// output to CompressDestSize, which compresses the longest prefix it can fit
// and reports how much input it used:
//
//	enc, _ := deflate.NewEncoder(deflate.LevelDefault)
//	n, used := enc.CompressDestSize(pcluster[:4096], data)
//	// pcluster[:n] inflates to data[:used]; advance data by used.
//	err := deflate.Decompress(out[:used], pcluster[:n])
//
// The input is parsed once. The encoder keeps the symbol statistics of the
// block it builds and estimates the block's size from their entropy as it
// grows; near the budget it builds the block's Huffman code and counts the
// exact size of the block with that code, with the fixed code and stored.
// When the block would pass the budget, it cuts it at the last token that
// fits, marks it final and writes it in the cheapest form, so the stream's
// final block ends exactly at the consumed input, as the Linux kernel's full
// decoding requires (erofs-format.md §8.3). Blocks hold up to 16384 symbols
// (WithBlockTokens); a block that ends early is written, non-final, and the
// stream goes on. Data whose first quarter of a pcluster does not compress is
// stored (it is found early, and crossed quickly: the parser steps over input
// where its searches keep failing).
//
// Levels choose the parse, as zlib's do: 1–3 greedy over hash chains of
// 4-byte sequences examined 4, 8 and 32 deep; 4–9 lazy (a match waits one
// byte for a longer one) with chains 16, 16, 24, 128, 1024 and 4096 deep.
// Level 6 looks ahead as libdeflate does (half as deep, and a match as
// long but much closer also wins); it compresses Linux sources in 4 KiB
// pclusters a little better than mkfs.erofs -zdeflate,level=6.
//
// Matches reach at most 32 KiB back (WindowBits). A stream never starts with
// a zero byte, as EROFS 0padding requires: a leading non-final stored block
// gets bit 3 set, a padding bit that inflaters ignore.
package deflate

import (
	"fmt"
)

// Compression levels accepted by NewEncoder.
const (
	LevelMin     = 1
	LevelDefault = 6
	LevelMax     = 9
)

// WindowBits is log2 of the largest match distance the encoder emits.
const WindowBits = 15

// maxInput bounds the input one call looks at, so positions fit in int32.
const maxInput = 1 << 30

// Option changes an Encoder's behaviour.
type Option func(*Encoder) error

// WithBlockTokens sets how many symbols a block collects before a new block
// with a fresh Huffman code begins (default 16384, as zlib). Smaller blocks
// adapt faster to changing data and cost more headers.
func WithBlockTokens(n int) Option {
	return func(e *Encoder) error {
		if n < 256 || n > 1<<20 {
			return fmt.Errorf("deflate: block tokens %d out of range 256..1048576", n)
		}
		e.maxTokens = n
		return nil
	}
}

// Encoder fills fixed-size outputs with raw DEFLATE streams. It keeps its
// tables between calls (no history: every call is an independent stream)
// and allocates nothing after the first calls. It is not safe for
// concurrent use.
type Encoder struct {
	p         levelParams
	maxTokens int
	mf        matchFinder

	// Parse state of the current call.
	i        int // next input position to examine
	tokEnd   int // input covered by tokens
	pending  bool
	prevLen  int
	prevDist int
	done     bool
	misses   int // searches without a match in a row

	// The block being built: its tokens, statistics and estimated size.
	tokens []token
	blk    block
	est    int
	mLit   [numLitLen]uint8 // model cost of each literal/length symbol
	mLen   [256]uint8       // model cost of each length, extra bits included
	mDist  [numDist]uint8   // model cost of each distance symbol with extra bits

	huff  huffman
	code  dynCode // code of the whole block
	code2 dynCode // code of a cut block's prefix
	bw    bitWriter
	// fallbacks counts streams that overran the budget and were redone as
	// stored blocks; tests check that it stays 0.
	fallbacks int
}

// NewEncoder returns an encoder at level LevelMin … LevelMax.
func NewEncoder(level int, opts ...Option) (*Encoder, error) {
	if level < LevelMin || level > LevelMax {
		return nil, fmt.Errorf("deflate: level %d out of range %d..%d", level, LevelMin, LevelMax)
	}
	e := &Encoder{p: levels[level], maxTokens: 1 << 14}
	for _, o := range opts {
		if err := o(e); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// CompressDestSize compresses the longest prefix of src whose compressed
// form fits in dst (len(dst) is the budget) into one raw DEFLATE stream
// whose final block ends exactly at src[:consumed]. It returns the bytes
// written to dst and the bytes of src consumed; consumed is 0 when not even
// one byte fits (or src is empty).
func (e *Encoder) CompressDestSize(dst, src []byte) (written, consumed int) {
	if len(src) > maxInput {
		src = src[:maxInput]
	}
	if len(src) == 0 || len(dst) == 0 {
		return 0, 0
	}
	e.mf.begin(len(src))
	e.i, e.tokEnd, e.pending, e.prevLen, e.done, e.misses = 0, 0, false, 0, false, 0
	w := &e.bw
	w.reset(dst)
	budget := 8 * len(dst)
	lastHeader := -1 // bit position of the last written block's header
	blockStart := 0
	e.newBlock()
	nextCheck := budget / 4 // early: incompressible data shows soon
	header := 600           // guess of a dynamic header's size, then the last one's
	for {
		e.parse(src, nextCheck, e.maxTokens)
		pos := w.pos()
		avail := budget - pos
		n := e.tokEnd - blockStart
		fix := e.blk.fixedBits()
		sto := storedBits(pos, n)
		ent := e.entropy()
		guess := ent + ent>>6 + header
		if !e.done && len(e.tokens) < e.maxTokens && sto <= fix && sto <= guess && e.blk.matched*8 < n {
			// Storing beats the codes by the estimate on a quarter of
			// the budget: incompressible data. Store as much as fits.
			// (A full block that stores best is written as it is, and
			// the stream goes on: with large budgets, compressible data
			// may follow.)
			consumed = e.finishStored(src, blockStart, lastHeader, budget)
			break
		}
		if min(guess, fix, sto) <= avail && !e.done && len(e.tokens) < e.maxTokens {
			// Under budget by the estimate: check again a little past
			// the point where the block should fill it.
			room := avail - min(guess, fix, sto)
			e.setModel()
			e.est = ent
			nextCheck = e.est + room + max(room/16, 64)
			continue
		}
		if len(e.tokens) >= e.maxTokens && !e.done && sto <= fix && sto <= guess && sto <= avail {
			// A full block of incompressible data: stored, no code needed.
			w.writeStored(src[blockStart:e.tokEnd], false)
			lastHeader = w.header
			blockStart = e.tokEnd
			e.newBlock()
			nextCheck = (budget - w.pos()) / 4
			continue
		}
		dyn := e.code.build(&e.blk, &e.huff)
		header = e.code.header
		best := min(dyn, fix, sto)
		switch {
		case best > avail:
			consumed = e.cut(src, blockStart, lastHeader, budget, dyn, fix)
		case e.done:
			e.writeBlock(src[blockStart:e.tokEnd], e.tokens, &e.code, dyn, fix, sto, true)
			consumed = e.tokEnd
		case len(e.tokens) >= e.maxTokens:
			e.writeBlock(src[blockStart:e.tokEnd], e.tokens, &e.code, dyn, fix, sto, false)
			lastHeader = w.header // of the last stored block if it took several
			blockStart = e.tokEnd
			e.newBlock()
			nextCheck = (budget - w.pos()) / 4
			continue
		default:
			// The estimate was pessimistic.
			room := avail - best
			e.setModel()
			e.est = dyn - header
			nextCheck = e.est + room + max(room/16, 64)
			continue
		}
		break
	}
	w.align()
	if w.overflow {
		// Cannot happen unless the bit accounting is wrong; stay correct.
		e.fallbacks++
		return e.storeOnly(dst, src)
	}
	if w.n > 0 && dst[0] == 0 {
		dst[0] |= 8 // a leading non-final stored block (§8.3)
	}
	return w.n, consumed
}

// newBlock starts a block whose size is first estimated with the fixed
// code's lengths.
func (e *Encoder) newBlock() {
	e.tokens = e.tokens[:0]
	e.blk.reset()
	e.est = 0
	e.mLit, e.mLen, e.mDist = fixedModel.lit, fixedModel.len, fixedModel.dist
}

// writeBlock writes a block in its cheapest form.
func (e *Encoder) writeBlock(data []byte, ts []token, c *dynCode, dyn, fix, sto int, final bool) {
	w := &e.bw
	switch min(dyn, fix, sto) {
	case sto:
		w.writeStored(data, final)
	case fix:
		w.writeFixed(ts, final)
	default:
		w.writeDynHeader(c, final)
		w.writeTokens(ts, c.litCode[:], c.lit[:], c.dstCode[:], c.dist[:])
	}
}

// cut ends the stream inside the current block: it finds the longest token
// prefix that fits with the block's dynamic code and with the fixed code,
// and the longest input that fits stored, and writes the one that covers
// the most input as the final block. It returns the input consumed.
func (e *Encoder) cut(src []byte, blockStart, lastHeader, budget, dyn, fix int) int {
	w := &e.bw
	avail := budget - w.pos()
	c := &e.code
	// The block's full sizes with both codes are known, and the parse
	// passed the budget by little: drop tokens from the end until the
	// rest fits (the longest fitting prefix, as sizes only grow).
	costD := dyn
	nD, endD := len(e.tokens), e.tokEnd
	for costD > avail && nD > 0 {
		nD--
		t := e.tokens[nD]
		if t < matchFlag {
			costD -= int(c.lit[t])
			endD--
			continue
		}
		l := uint32(t) >> 16 & 0xff
		ds, dx := distSym(uint32(t) & 0xffff)
		costD -= int(c.lit[257+int(lenSym[l])]) + int(c.dist[ds]) + int(lenExtra[l]) + int(dx)
		endD -= int(l) + 3
	}
	if costD > avail {
		endD = blockStart // not even the header fits
	}
	// The fixed code matters only if it covers more than the dynamic one.
	costF := fix
	nF, endF := len(e.tokens), e.tokEnd
	for costF > avail && endF > endD {
		nF--
		t := e.tokens[nF]
		if t < matchFlag {
			costF -= int(fixedLitLen[t])
			endF--
			continue
		}
		l := uint32(t) >> 16 & 0xff
		_, dx := distSym(uint32(t) & 0xffff)
		costF -= int(fixedLitLen[257+int(lenSym[l])]) + 5 + int(lenExtra[l]) + int(dx)
		endF -= int(l) + 3
	}
	if costF > avail {
		endF = blockStart
	}
	endS := blockStart + storedCapacity(w.pos(), budget)
	endS = min(endS, len(src))
	end := max(endD, endF, endS)
	switch {
	case end == blockStart:
		return e.endAtLastBlock(lastHeader, blockStart)
	case end == endD && costD <= avail:
		ts := e.tokens[:nD]
		if nD < len(e.tokens) {
			// A code made for the prefix is usually a little smaller.
			for _, t := range e.tokens[nD:] {
				e.blk.remove(t)
			}
			if e.code2.build(&e.blk, &e.huff) <= avail {
				c = &e.code2
			}
		}
		w.writeDynHeader(c, true)
		w.writeTokens(ts, c.litCode[:], c.lit[:], c.dstCode[:], c.dist[:])
	case end == endF:
		w.writeFixed(e.tokens[:nF], true)
	default:
		w.writeStored(src[blockStart:end], true)
	}
	return end
}

// finishStored ends the stream with stored blocks holding as much input as
// fits.
func (e *Encoder) finishStored(src []byte, blockStart, lastHeader, budget int) int {
	w := &e.bw
	end := min(blockStart+storedCapacity(w.pos(), budget), len(src))
	if end == blockStart {
		return e.endAtLastBlock(lastHeader, blockStart)
	}
	w.writeStored(src[blockStart:end], true)
	return end
}

// endAtLastBlock makes the last written block final, when nothing more
// fits; with no block written, nothing fits at all.
func (e *Encoder) endAtLastBlock(lastHeader, blockStart int) int {
	if lastHeader < 0 {
		e.bw.reset(e.bw.dst)
		return 0
	}
	e.bw.setBit(lastHeader)
	return blockStart
}

// storeOnly encodes the input as stored blocks from scratch.
func (e *Encoder) storeOnly(dst, src []byte) (int, int) {
	w := &e.bw
	w.reset(dst)
	n := min(storedCapacity(0, 8*len(dst)), len(src))
	if n == 0 {
		return 0, 0
	}
	w.writeStored(src[:n], true)
	w.align()
	if w.overflow {
		return 0, 0
	}
	return w.n, n
}

package zstd

import (
	"encoding/binary"
	"math/bits"
)

const (
	maxBlock       = 128 << 10 // largest block content (RFC 8878 Block_Maximum_Size)
	frameHeaderLen = 6         // magic, descriptor, window descriptor
	blockHeaderLen = 3
)

// Block types.
const (
	blockRaw        = 0
	blockCompressed = 2
)

// CompressDestSize compresses the longest prefix of src it can fit into
// dst and returns the frame length and the prefix length. dst[:written] is
// one zstd frame that decodes to exactly src[:consumed]; consumed is 0
// (and written 0) when not even one byte fits.
//
// The frame is a run of blocks of at most 128 KiB of input each; all but
// the last are whole, the last is cut where the budget ends: its
// sequences are counted against the space left as they are chosen, and
// the exact size of each candidate block is checked before it is kept.
func (e *Encoder) CompressDestSize(dst, src []byte) (written, consumed int) {
	budget := len(dst)
	if len(src) == 0 || budget < frameHeaderLen+blockHeaderLen+1 {
		return 0, 0
	}
	e.newFrame(e.parsed)
	e.parsed = 0
	e.frep = [2]int{1, 4}
	binary.LittleEndian.PutUint32(dst, 0xFD2FB528)
	dst[4] = 0                       // no checksum, no content size, not single-segment
	dst[5] = (e.windowLog - 10) << 3 // window = 1 << windowLog
	out, pos, lastHdr := frameHeaderLen, 0, -1
	r := initialReps
	for pos < len(src) {
		room := budget - out - blockHeaderLen
		if room < 1 {
			break
		}
		end := min(len(src), pos+e.blockMax)
		typ, n, c := e.block(dst[out+blockHeaderLen:budget], src, pos, end, &r)
		if c == 0 {
			break
		}
		var size int
		switch typ {
		case blockRaw:
			size = c
		default:
			size = n
		}
		v := uint32(typ)<<1 | uint32(size)<<3
		dst[out], dst[out+1], dst[out+2] = byte(v), byte(v>>8), byte(v>>16)
		lastHdr = out
		out += blockHeaderLen + n
		pos += c
		if pos < end {
			break // the budget is full
		}
	}
	if lastHdr < 0 {
		return 0, 0
	}
	dst[lastHdr] |= 1 // Last_Block
	return out, pos
}

// block writes one block body for a prefix of src[pos:end] into dst (its
// length is the room left) and returns the block type, the body length
// and the input consumed. A raw block is chosen when it holds more input.
// r is the repeat-offset history, updated to the block's end.
func (e *Encoder) block(dst, src []byte, pos, end int, r *reps) (typ byte, n, consumed int) {
	room := len(dst)
	rawN := min(room, end-pos)
	e.seqs = e.seqs[:0]
	e.lits = e.lits[:0]
	e.ip, e.anchor = pos, pos
	e.hist = codeHist{}
	if end-pos <= room {
		return e.wholeBlock(dst, src, pos, end, r)
	}
	crep := *r
	pe := e.parseToBudget(src, pos, end, room, &crep)
	cur, t, size, raw := e.fitCut(src, pos, end, pe, room, rawN)
	if raw {
		return e.rawBlock(dst, src, pos, rawN)
	}
	bestN, bestC := 0, 0
	if size >= 0 {
		bestN, bestC = e.fillSlack(dst, src, pos, end, cur, t, size)
	}
	// Raw wins when it holds more input, or as much in no more bytes
	// (when the whole rest fits raw, the compressed form is still the
	// smaller one to keep).
	if bestC < rawN || bestC == rawN && bestN >= rawN {
		return e.rawBlock(dst, src, pos, rawN)
	}
	if pos+bestC == end {
		// The frame goes on: the next block starts from the history
		// after the sequences written (the literals after them do not
		// change it): the parse's when all of them are.
		if cur.k == len(e.seqs) {
			*r = crep
		} else {
			*r = replay(e.seqs[:cur.k], *r)
		}
	}
	e.ip, e.anchor = pos+bestC, pos+bestC
	return blockCompressed, bestN, bestC
}

// parseToBudget parses src from pos until the cost model estimates that
// the sequences fill room bytes (or the block input ends), starting with
// as much input as there is room: random data stops there, text goes on
// in steps sized by its ratio so far. crep, the repeat-offset history,
// codes the sequences as they come. It returns where the parse stopped,
// the literals after the last sequence included.
func (e *Encoder) parseToBudget(src []byte, pos, end, room int, crep *reps) (pe int) {
	c := &e.cost
	target := room * 128 // in 1/16 bits
	limit := min(end, pos+max(room, 256))
	if end-pos <= 2*room {
		// A small file: at most two rounds of parsing either way.
		limit = end
	}
	var est int
	c.litHist, c.litCounted = [256]uint32{}, 0
	incompressible := false
	for step := 0; ; step++ {
		k := len(e.seqs)
		e.parse(src, limit, end)
		crep.code(e.seqs[k:], &e.hist)
		pe = min(max(e.ip, limit), end)
		trailing := src[e.anchor:max(e.anchor, pe)]
		// The first costs, and those of blocks with few sequences (random
		// data), from a sample: incompressible input is seen at a quarter
		// of the work. Then from all of the block so far: the parse stops
		// where the cut will be.
		c.stats(&e.hist, len(e.seqs), e.lits, trailing, step == 0 || len(e.seqs) < 64)
		est = c.fixed + c.seqCost(&e.hist) + (len(e.lits)+len(trailing))*c.litAvg
		if est > target || pe >= end {
			break
		}
		if est >= (pe-pos)*8*16*31/32 {
			incompressible = true // so far: a raw block will win
			break
		}
		// The rest of the budget at the ratio so far, and a little more:
		// parsing past the cut is work thrown away, stopping short costs
		// one more round of this loop. At most twice as far as so far:
		// the ratio of the first few KiB can be far from the block's.
		grow := min((target-est)*(pe-pos)/est, pe-pos)
		limit = min(end, pe+grow+grow/32+32)
	}
	if c.sampled && !incompressible && len(e.seqs) >= 64 && (pe < end || est > target-target/8) {
		// The parse stopped at its first step: the cut is priced with
		// all the literals (random data, going raw, is not counted again).
		// Not when all of the block is sure to fit: it is encoded whole
		// whatever the costs, which only matter if it does not.
		c.stats(&e.hist, len(e.seqs), e.lits, src[e.anchor:max(e.anchor, pe)], false)
	}
	return pe
}

// fitCut finds a cut of the parse (up to pe) that fits room: estimate,
// encode exactly, correct the estimate by the error seen. It aims 1/128
// under the budget, above the estimate's usual error on text, so that an
// encode seldom goes over and is done again. It returns the cut, the
// sequences before cur and t literals after them, encoded in e.litB and
// e.seqB, and their size (-1 if no cut fits after a few tries); raw when
// a cut would hold little more input than a raw block of rawN bytes.
func (e *Encoder) fitCut(src []byte, pos, end, pe, room, rawN int) (cur cursor, t, size int, raw bool) {
	c := &e.cost
	target := room * 128 // in 1/16 bits
	margin := room * 128 / 128
	all := cursor{k: len(e.seqs), end: e.anchor, lc: len(e.lits), cum: c.seqCost(&e.hist) + len(e.lits)*c.litAvg}
	cur, t = all, pe-e.anchor
	if c.estimate(cur, t) > target-margin {
		cur, t = e.cut(cur, target-margin, end)
		if cur.end+t-pos <= rawN+rawN/64 {
			return cur, t, 0, true
		}
	}
	for try := 0; ; try++ {
		size = e.encode(src, all, cur, t)
		if size <= room {
			return cur, t, size, false
		}
		if try == 5 || cur.k == 0 && t == 0 {
			return cur, t, -1, false
		}
		delta := size*128 - c.estimate(cur, t)
		nc, nt := e.cut(cur, target-delta-margin, end)
		if nc.end+nt >= cur.end+t {
			// No progress from the estimate: drop the overshoot's worth.
			nc, nt = e.cut(cur, c.estimate(cur, t)-(size-room)*128-margin, end)
		}
		cur, t = nc, nt
	}
}

// fillSlack copies the encoded cut (cur, t), of size bytes, into dst and,
// when more than 1/64 of dst is left, fills it with more literals, which
// only changes the literals section. It returns the body length and the
// input it holds.
func (e *Encoder) fillSlack(dst, src []byte, pos, end int, cur cursor, t, size int) (n, consumed int) {
	room := len(dst)
	tol := max(2, room/64)
	copy(dst, e.litB)
	copy(dst[len(e.litB):], e.seqB)
	n, consumed = size, cur.end+t-pos
	if slack := room - size; slack > tol && pos+consumed < end {
		// At most two tries: the second with half the literals.
		nt := e.fill(src, cur, t, slack, end)
		for try := 0; try < 2 && nt > t; try++ {
			s2 := e.encodeMore(src, cur, t, nt)
			if s2 <= room {
				copy(dst, e.litB)
				copy(dst[len(e.litB):], e.seqB)
				return s2, cur.end + nt - pos
			}
			e.encodeMore(src, cur, nt, t)
			nt = t + (nt-t)/2
		}
	}
	return n, consumed
}

// wholeBlock writes src[pos:end], which fits the room of dst as a raw
// block, compressed when that is smaller. No cut is to be found, so the
// cost model is skipped: the block is parsed to its end and encoded
// once. Most small files take this path.
func (e *Encoder) wholeBlock(dst, src []byte, pos, end int, r *reps) (byte, int, int) {
	e.parse(src, end, end)
	crep := *r
	crep.code(e.seqs, &e.hist)
	all := cursor{k: len(e.seqs), end: e.anchor, lc: len(e.lits)}
	size := e.encode(src, all, all, end-e.anchor)
	if size >= end-pos {
		return e.rawBlock(dst, src, pos, end-pos)
	}
	copy(dst, e.litB)
	copy(dst[len(e.litB):], e.seqB)
	*r = crep // the history after every sequence, as replay would find
	e.ip, e.anchor = end, end
	return blockCompressed, size, end - pos
}

func (e *Encoder) rawBlock(dst, src []byte, pos, n int) (byte, int, int) {
	copy(dst, src[pos:pos+n])
	e.ip, e.anchor = pos+n, pos+n
	return blockRaw, n, n
}

// encode builds the literals and sequences sections of the sequences
// before cur followed by t literals into e.litB and e.seqB and returns
// their total size. all is the cursor after every parsed sequence.
func (e *Encoder) encode(src []byte, all, cur cursor, t int) int {
	e.tlits = append(e.tlits[:0], e.lits[:cur.lc]...)
	e.tlits = append(e.tlits, src[cur.end:cur.end+t]...)
	e.litB = writeLiterals(e.litB[:0], e.tlits, &e.huff)
	// The codes of the sequences kept: all of the block's less the ones
	// after the cut.
	h := e.hist
	for i := cur.k; i < all.k; i++ {
		s := &e.seqs[i]
		h.ll[s.llc&63]--
		h.ml[s.mlc&63]--
		h.of[s.ofc&63]--
	}
	e.seqB = e.sc.writeSequences(e.seqB[:0], e.seqs[:cur.k], &h)
	return len(e.litB) + len(e.seqB)
}

// fill is how far the trailing literals of the encoded cut (cur, t) can
// grow into slack bytes: priced with the Huffman table just built, less a
// few bytes for stream padding and a longer header.
func (e *Encoder) fill(src []byte, cur cursor, t, slack, end int) int {
	at := cur.end + t
	allowed := slack - 6
	if allowed <= 0 {
		return t
	}
	if e.litB[0]&3 != litCompressed {
		return t + min(allowed, end-at) // raw literals: a byte each
	}
	add := min(allowed*128/e.cost.litAvg+allowed/8, end-at)
	var hist [256]uint32
	for _, b := range src[at : at+add] {
		hist[b]++
	}
	for add > 0 {
		est := e.huff.bitsOf(&hist)
		if est < 0 {
			// A byte the table cannot code: the new table will, at a
			// guess of at most nine bits a byte.
			return t + min(add, allowed*8/9)
		}
		est = (est + 7) >> 3
		if est <= allowed {
			return t + add
		}
		drop := min(max((est-allowed)*add/est, 1), add)
		for _, b := range src[at+add-drop : at+add] {
			hist[b]--
		}
		add -= drop
	}
	return t
}

// encodeMore changes the trailing literals of the encoded cut from t to
// nt and rebuilds the literals section only: the last literals are not
// part of any sequence.
func (e *Encoder) encodeMore(src []byte, cur cursor, t, nt int) int {
	at := cur.end
	if nt > t {
		e.tlits = append(e.tlits, src[at+t:at+nt]...)
	} else {
		e.tlits = e.tlits[:len(e.tlits)-(t-nt)]
	}
	e.litB = writeLiterals(e.litB[:0], e.tlits, &e.huff)
	return len(e.litB) + len(e.seqB)
}

func (e *Encoder) parse(src []byte, limit, end int) {
	if e.p.depth > 0 {
		e.parseChain(src, limit, end)
		return
	}
	e.parseFast(src, limit, end)
}

// costModel estimates sizes in 1/16 bits from the statistics of the
// parsed block: order-0 entropy of literals and of each code stream plus
// extra bits.
type costModel struct {
	ll, ml, of [64]int32
	litAvg     int
	fixed      int
	sampled    bool // the costs are from a sample of the literals

	// The literals of the block counted so far (the first litCounted).
	litHist    [256]uint32
	litCounted int
}

// A cursor is a point of the parsed block: after its first k sequences,
// at input position end, with lc literals, estimated at cum (1/16 bits,
// their literals included). The cut moves it one sequence at a time from
// where it was, so the costs of sequences far from the cut are never
// summed one by one: the block's total comes from its code histogram.
type cursor struct{ k, end, lc, cum int }

// log2x16 of x of any size, approximately.
func log16(x uint32) int {
	if x < uint32(len(log2x16)) {
		return int(log2x16[x])
	}
	l := bits.Len32(x) - 9
	return int(log2x16[x>>l]) + 16*l
}

// stats sets the unit costs from the code histogram h of nseq sequences
// and from the literals. With sample set, only every fourth literal is
// counted: enough to steer the parse (and to see that random data does
// not compress: the entropy of 1000 samples of uniform bytes comes out
// under 8 bits by only 0.2), at a quarter of the work, which on random
// data is most of the cost.
//
// Without sample, literals are counted once per block: lits only grows
// between calls and its histogram is kept; the trailing literals, which
// may yet become part of a match, are counted every time.
func (c *costModel) stats(h *codeHist, nseq int, lits, trailing []byte, sample bool) {
	var hist [256]uint32
	if sample {
		for i := 0; i < len(lits); i += 4 {
			hist[lits[i]]++
		}
		for i := 0; i < len(trailing); i += 4 {
			hist[trailing[i]]++
		}
	} else {
		countBytes(&c.litHist, lits[c.litCounted:])
		c.litCounted = len(lits)
		hist = c.litHist
		countBytes(&hist, trailing)
	}
	c.sampled = sample
	n := uint32(0)
	for _, h := range hist {
		n += h
	}
	ln := log16(n)
	present := 0
	sum := 0
	for _, h := range hist {
		if h == 0 {
			continue
		}
		present++
		// Huffman codes are whole bits and at most 11 long, so a
		// symbol costs a little over its entropy: 3/128 more.
		v := (ln - log16(h)) * 131 / 128
		sum += int(h) * min(max(v, 16), 11*16)
	}
	c.litAvg = 6 * 16
	if n > 0 {
		c.litAvg = sum/int(n) + 1
	}
	sn := log16(uint32(nseq))
	for s := range maxLLCode + 1 {
		c.ll[s] = int32(max(sn-log16(h.ll[s]), 4) + 16*int(llBits[s]))
	}
	for s := range maxMLCode + 1 {
		c.ml[s] = int32(max(sn-log16(h.ml[s]), 4) + 16*int(mlBits[s]))
	}
	for s := range maxOFCode + 1 {
		c.of[s] = int32(max(sn-log16(h.of[s]), 4) + 16*s)
	}
	// Headers: block, literals header and Huffman table (about half a
	// byte per symbol), sequence count, modes and tables.
	c.fixed = (3 + 5 + 8 + present/2 + 4 + 24) * 128
}

// countBytes adds the byte histogram of b to hist. Long inputs are
// counted in four tables, so that runs of one byte do not wait on their
// own increments; short ones directly (four tables to clear and add up
// cost more than the stalls).
func countBytes(hist *[256]uint32, b []byte) {
	if len(b) < 1024 {
		for _, v := range b {
			hist[v]++
		}
		return
	}
	var h [4][256]uint32
	for len(b) >= 4 {
		h[0][b[0]]++
		h[1][b[1]]++
		h[2][b[2]]++
		h[3][b[3]]++
		b = b[4:]
	}
	for _, v := range b {
		h[0][v]++
	}
	for i := range hist {
		hist[i] += h[0][i] + h[1][i] + h[2][i] + h[3][i]
	}
}

// seqCost is the estimated cost of the sequences counted in h, without
// their literals.
func (c *costModel) seqCost(h *codeHist) int {
	sum := 0
	for s := range maxLLCode + 1 {
		sum += int(h.ll[s]) * int(c.ll[s])
	}
	for s := range maxMLCode + 1 {
		sum += int(h.ml[s]) * int(c.ml[s])
	}
	for s := range maxOFCode + 1 {
		sum += int(h.of[s]) * int(c.of[s])
	}
	return sum
}

// cost is the estimated cost of one sequence and its literals.
func (c *costModel) cost(s *seq) int {
	return int(s.litLen)*c.litAvg + int(c.ll[s.llc&63]+c.ml[s.mlc&63]+c.of[s.ofc&63])
}

// estimate is the cost of the sequences before cur and t more literals.
func (c *costModel) estimate(cur cursor, t int) int {
	return c.fixed + cur.cum + t*c.litAvg
}

// cut moves cur to the largest prefix of the parsed sequences, followed
// by t literals not past end, whose estimate is within target.
func (e *Encoder) cut(cur cursor, target, end int) (cursor, int) {
	c := &e.cost
	for cur.k > 0 && c.fixed+cur.cum > target {
		cur.k--
		s := &e.seqs[cur.k]
		cur.cum -= c.cost(s)
		cur.end -= int(s.litLen + s.matchLen)
		cur.lc -= int(s.litLen)
	}
	for cur.k < len(e.seqs) {
		s := &e.seqs[cur.k]
		next := cur.cum + c.cost(s)
		if c.fixed+next > target {
			break
		}
		cur = cursor{k: cur.k + 1, end: cur.end + int(s.litLen+s.matchLen), lc: cur.lc + int(s.litLen), cum: next}
	}
	t := max(target-c.fixed-cur.cum, 0) / c.litAvg
	return cur, min(t, end-cur.end)
}

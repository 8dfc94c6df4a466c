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
	target := room * 128 // in 1/16 bits

	// Parse until the estimate says the budget is reached (or the block
	// input ends), starting with as much input as there is room: random
	// data stops there, text goes on in steps sized by its ratio so far.
	limit := min(end, pos+max(room, 256))
	var pe int
	e.crep = *r
	e.cost.statSeqs = -1
	for {
		e.parse(src, limit, end)
		pe = min(max(e.ip, limit), end)
		coded := len(e.seqs)
		if e.cost.statSeqs < 0 || e.cost.statSeqs < 64 && coded > 2*e.cost.statSeqs {
			// Costs from a handful of sequences are noise: retake them.
			e.cost.stats(e.seqs, e.lits, src[e.anchor:max(e.anchor, pe)], true)
			e.cost.reset(pos)
		}
		e.cost.extend(e.seqs, e.lits)
		est := e.cost.estimate(len(e.seqs), pe-int(e.cost.p[len(e.seqs)].end))
		if est > target || pe >= end {
			break
		}
		if est >= (pe-pos)*8*16*31/32 {
			break // incompressible so far: a raw block will win
		}
		grow := (target - est) / max(est/(pe-pos), 1)
		limit = min(end, pe+grow+grow/8+64)
	}
	if e.cost.statSeqs < len(e.seqs)*3/4 {
		// The costs came from the first part of the block: retake them
		// from all of it, the cut is priced more closely.
		e.cost.stats(e.seqs, e.lits, src[e.anchor:max(e.anchor, pe)], false)
		e.cost.reset(pos)
		e.cost.extend(e.seqs, e.lits)
	}

	// Find a cut that fits: estimate, encode exactly, correct the
	// estimate by the error seen. Aim 1/128 under the budget: estimates
	// err by about 0.5% (rms) on text, so one encode in a hundred goes
	// over and is done again. Then, when more than 1/64 is left, fill it
	// with literals, which only changes the literals section.
	margin := room * 128 / 128
	tol := max(2, room/64)
	k, t := len(e.seqs), pe-int(e.cost.p[len(e.seqs)].end)
	if e.cost.estimate(k, t) > target-margin {
		k, t = e.cost.cut(target-margin, end)
		if int(e.cost.p[k].end)+t-pos <= rawN+rawN/64 {
			return e.rawBlock(dst, src, pos, rawN)
		}
	}
	size := 0
	for try := 0; ; try++ {
		size = e.encode(src, k, t)
		if size <= room {
			break
		}
		if try == 5 || k == 0 && t == 0 {
			size = -1
			break
		}
		delta := size*128 - e.cost.estimate(k, t)
		nk, nt := e.cost.cut(target-delta-margin, end)
		if int(e.cost.p[nk].end)+nt >= int(e.cost.p[k].end)+t {
			// No progress from the estimate: drop the overshoot's worth.
			nk, nt = e.cost.cut(e.cost.estimate(k, t)-(size-room)*128-margin, end)
		}
		k, t = nk, nt
	}
	bestN, bestC := 0, 0
	if size >= 0 {
		copy(dst, e.litB)
		copy(dst[len(e.litB):], e.seqB)
		bestN, bestC = size, int(e.cost.p[k].end)+t-pos
		if slack := room - size; slack > tol && pos+bestC < end {
			// At most two tries: the second with half the literals.
			nt := e.fill(src, k, t, slack, end)
			for try := 0; try < 2 && nt > t; try++ {
				s2 := e.encodeMore(src, k, t, nt)
				if s2 <= room {
					copy(dst, e.litB)
					copy(dst[len(e.litB):], e.seqB)
					bestN, bestC = s2, int(e.cost.p[k].end)+nt-pos
					break
				}
				e.encodeMore(src, k, nt, t)
				nt = t + (nt-t)/2
			}
		}
	}
	// Raw wins when it holds more input, or as much in no more bytes
	// (when the whole rest fits raw, the compressed form is still the
	// smaller one to keep).
	if bestC < rawN || bestC == rawN && bestN >= rawN {
		return e.rawBlock(dst, src, pos, rawN)
	}
	// Settle the history at the chosen cut for the next block.
	if pos+bestC == end {
		// The frame goes on: the next block starts from this history.
		k = e.cost.seqsBefore(pos + bestC)
		*r = code(e.seqs[:k], *r)
	}
	e.ip, e.anchor = pos+bestC, pos+bestC
	return blockCompressed, bestN, bestC
}

func (e *Encoder) rawBlock(dst, src []byte, pos, n int) (byte, int, int) {
	copy(dst, src[pos:pos+n])
	e.ip, e.anchor = pos+n, pos+n
	return blockRaw, n, n
}

// encode builds the literals and sequences sections of the first k
// sequences followed by t literals into e.litB and e.seqB and returns
// their total size.
func (e *Encoder) encode(src []byte, k, t int) int {
	lc := int(e.cost.p[k].lc)
	e.tlits = append(e.tlits[:0], e.lits[:lc]...)
	at := int(e.cost.p[k].end)
	e.tlits = append(e.tlits, src[at:at+t]...)
	e.litB = writeLiterals(e.litB[:0], e.tlits, &e.huff)
	e.seqB = e.sc.writeSequences(e.seqB[:0], e.seqs[:k])
	return len(e.litB) + len(e.seqB)
}

// fill is how far the trailing literals of the encoded cut (k, t) can
// grow into slack bytes: priced with the Huffman table just built, less a
// few bytes for stream padding and a longer header.
func (e *Encoder) fill(src []byte, k, t, slack, end int) int {
	at := int(e.cost.p[k].end) + t
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
		est := e.huff.EstimateSize(&hist)
		if est < 0 {
			// A byte the table cannot code: the new table will, at a
			// guess of at most nine bits a byte.
			return t + min(add, allowed*8/9)
		}
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
func (e *Encoder) encodeMore(src []byte, k, t, nt int) int {
	at := int(e.cost.p[k].end)
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
	lit        [256]int32
	ll, ml, of [maxMLCode + 1]int32
	statSeqs   int     // sequences the unit costs were taken from
	p          []point // p[i]: the block after seqs[:i]
	litAvg     int
	fixed      int
}

// A point is the state of a block after a number of sequences: their
// estimated cost (1/16 bits with their literals), the input position
// reached and the literals used.
type point struct{ cum, end, lc int32 }

// log2x16 of x of any size, approximately.
func log16(x uint32) int {
	if x < uint32(len(log2x16)) {
		return int(log2x16[x])
	}
	l := bits.Len32(x) - 9
	return int(log2x16[x>>l]) + 16*l
}

// stats sets the unit costs from the parsed sequences and literals.
// With sample set, only every fourth literal is counted: enough to steer
// the parse (and to see that random data does not compress: the entropy
// of 1000 samples of uniform bytes comes out under 8 bits by only 0.2),
// at a quarter of the work, which on random data is most of the cost.
func (c *costModel) stats(seqs []seq, lits, trailing []byte, sample bool) {
	var hist [256]uint32
	step := 1
	if sample {
		step = 4
	}
	n := uint32(0)
	for i := 0; i < len(lits); i += step {
		hist[lits[i]]++
	}
	for i := 0; i < len(trailing); i += step {
		hist[trailing[i]]++
	}
	for _, h := range hist {
		n += h
	}
	ln := log16(n)
	present := 0
	sum := 0
	for b, h := range hist {
		if h == 0 {
			c.lit[b] = 11 * 16
			continue
		}
		present++
		// Huffman codes are whole bits and at most 11 long: about 2%
		// over the entropy on text.
		v := (ln - log16(h)) * 131 / 128
		c.lit[b] = int32(min(max(v, 16), 11*16))
		sum += int(h) * int(c.lit[b])
	}
	c.litAvg = 6 * 16
	if n > 0 {
		c.litAvg = sum/int(n) + 1
	}
	var llH, mlH, ofH [maxMLCode + 1]uint32
	for i := range seqs {
		llH[seqs[i].llc]++
		mlH[seqs[i].mlc]++
		ofH[seqs[i].ofc]++
	}
	sn := log16(uint32(len(seqs)))
	for s := range c.ll {
		c.ll[s] = int32(max(sn-log16(llH[s]), 4) + 16*int(llBits[min(s, maxLLCode)]))
		c.ml[s] = int32(max(sn-log16(mlH[s]), 4) + 16*int(mlBits[s]))
		c.of[s] = int32(max(sn-log16(ofH[s]), 4) + 16*s)
	}
	// Headers: block, literals header and Huffman table (about half a
	// byte per symbol), sequence count, modes and tables.
	c.fixed = (3 + 5 + 8 + present/2 + 4 + 24) * 128
	c.statSeqs = len(seqs)
}

// reset starts the cumulative costs of a block at input position pos.
func (c *costModel) reset(pos int) {
	c.p = append(c.p[:0], point{end: int32(pos)})
}

// extend appends the cumulative costs of the sequences not yet counted.
func (c *costModel) extend(seqs []seq, lits []byte) {
	i := len(c.p) - 1
	cost, p, l := int(c.p[i].cum), int(c.p[i].end), int(c.p[i].lc)
	for ; i < len(seqs); i++ {
		s := &seqs[i]
		l += int(s.litLen)
		p += int(s.litLen + s.matchLen)
		cost += int(s.litLen)*c.litAvg + int(c.ll[s.llc]+c.ml[s.mlc]+c.of[s.ofc])
		c.p = append(c.p, point{cum: int32(cost), end: int32(p), lc: int32(l)})
	}
}

// estimate is the cost of the first k sequences and t more literals.
func (c *costModel) estimate(k, t int) int {
	return c.fixed + int(c.p[k].cum) + t*c.litAvg
}

// cut is the largest prefix (k sequences, t literals, not past end) whose
// estimate is within target.
func (c *costModel) cut(target, end int) (k, t int) {
	lo, hi := 0, len(c.p)-1
	for lo < hi {
		m := (lo + hi + 1) / 2
		if c.fixed+int(c.p[m].cum) <= target {
			lo = m
		} else {
			hi = m - 1
		}
	}
	k = lo
	left := target - c.fixed - int(c.p[k].cum)
	t = max(left, 0) / c.litAvg
	return k, min(t, end-int(c.p[k].end))
}

// seqsBefore is the number of sequences that end at or before p.
func (c *costModel) seqsBefore(p int) int {
	lo, hi := 0, len(c.p)-1
	for lo < hi {
		m := (lo + hi + 1) / 2
		if int(c.p[m].end) <= p {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

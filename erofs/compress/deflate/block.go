package deflate

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// bitWriter writes a DEFLATE bit stream (least significant bit first) into
// a fixed buffer. The encoder computes every block's exact size before it
// writes it, so the buffer never fills up; overflow records an accounting
// bug instead of panicking.
type bitWriter struct {
	dst      []byte
	n        int    // bytes written to dst
	acc      uint64 // pending bits, fewer than 32 between calls
	nbits    uint
	overflow bool
	header   int // bit position of the last block header written
}

func (w *bitWriter) reset(dst []byte) {
	*w = bitWriter{dst: dst}
}

// pos is the number of bits written so far.
func (w *bitWriter) pos() int { return w.n*8 + int(w.nbits) }

// bits writes the n ≤ 32 low bits of v.
func (w *bitWriter) bits(v uint64, n uint) {
	w.acc |= v << w.nbits
	w.nbits += n
	if w.nbits >= 32 {
		if w.n+4 <= len(w.dst) {
			binary.LittleEndian.PutUint32(w.dst[w.n:], uint32(w.acc))
		} else {
			w.overflow = true
			return
		}
		w.n += 4
		w.acc >>= 32
		w.nbits -= 32
	}
}

// align flushes the pending bits, padding with zeros to a byte boundary.
func (w *bitWriter) align() {
	for w.nbits > 0 {
		if w.n >= len(w.dst) {
			w.overflow = true
			return
		}
		w.dst[w.n] = byte(w.acc)
		w.n++
		w.acc >>= 8
		w.nbits = max(w.nbits, 8) - 8
	}
	w.acc = 0
}

// setBit sets bit p of the stream (an earlier block's BFINAL).
func (w *bitWriter) setBit(p int) {
	if p >= w.n*8 {
		w.acc |= 1 << uint(p-w.n*8)
	} else {
		w.dst[p/8] |= 1 << uint(p%8)
	}
}

// storedCapacity is how many bytes of stored blocks fit between bit
// position pos and the budget (in bits): each stored block holds up to
// 65535 bytes behind a 3-bit header, padding to a byte and 4 length bytes.
func storedCapacity(pos, budget int) int {
	start := (pos+3+7)/8 + 4 // first byte of the first block's data
	left := budget/8 - start
	n := 0
	for left > 0 {
		c := min(left, 65535)
		n += c
		left -= c + 5
	}
	return n
}

// storedBits is the size in bits of n bytes as stored blocks from pos.
func storedBits(pos, n int) int {
	end := (pos+3+7)/8*8 + 32 + 8*n
	if n > 65535 {
		end += (n - 1) / 65535 * 40
	}
	return end - pos
}

// writeStored writes data as stored blocks, the last of them final if final.
func (w *bitWriter) writeStored(data []byte, final bool) {
	for {
		c := min(len(data), 65535)
		last := c == len(data)
		var h uint64
		if final && last {
			h = 1
		}
		w.header = w.pos()
		w.bits(h, 3)
		w.align()
		if w.overflow || w.n+4+c > len(w.dst) {
			w.overflow = true
			return
		}
		binary.LittleEndian.PutUint16(w.dst[w.n:], uint16(c))
		binary.LittleEndian.PutUint16(w.dst[w.n+2:], ^uint16(c))
		w.n += 4
		w.n += copy(w.dst[w.n:], data[:c])
		data = data[c:]
		if last {
			return
		}
	}
}

// A token is a literal byte (< 1<<31) or a match: 1<<31 | (length-3)<<16 |
// (distance-1).
type token uint32

const matchFlag = 1 << 31

// block collects the symbol statistics of the block being built.
type block struct {
	lit   [numLitLen]uint32
	dist  [numDist]uint32
	extra int // extra bits of all lengths and distances
	// matched counts the input bytes covered by matches.
	matched int
	matches int
}

func (b *block) reset() {
	*b = block{}
	b.lit[endOfBlock] = 1
}

// remove uncounts token t.
func (b *block) remove(t token) {
	if t < matchFlag {
		b.lit[t]--
		return
	}
	l := t >> 16 & 0xff
	ds, dx := distSym(uint32(t) & 0xffff)
	b.lit[257+int(lenSym[l])]--
	b.dist[ds]--
	b.extra -= int(lenExtra[l]) + int(dx)
	b.matched -= int(l) + 3
	b.matches--
}

// fixedBits is the size of the block with the fixed code, header included.
func (b *block) fixedBits() int {
	n := 3 + b.extra
	for s, f := range b.lit {
		n += int(f) * int(fixedLitLen[s])
	}
	for _, f := range b.dist {
		n += int(f) * 5
	}
	return n
}

// dynCode is a dynamic Huffman code with its encoded header.
type dynCode struct {
	lit     [numLitLen]uint8
	dist    [numDist]uint8
	litCode [numLitLen]uint16
	dstCode [numDist]uint16
	cl      [numCodeLen]uint8
	clCode  [numCodeLen]uint16
	clFreq  [numCodeLen]uint32
	rle     []uint16 // code-length symbols: symbol | extra value << 5
	hlit    int
	hdist   int
	hclen   int
	header  int // header bits, the 3-bit block header included
}

// build makes the code for b's statistics and returns the block's size in
// bits with this code, header included.
func (c *dynCode) build(b *block, h *huffman) int {
	h.build(b.lit[:], c.lit[:], maxBits)
	h.build(b.dist[:], c.dist[:], maxBits)
	c.header = c.makeHeader(h)
	n := c.header + b.extra
	for s, f := range b.lit {
		n += int(f) * int(c.lit[s])
	}
	for s, f := range b.dist {
		n += int(f) * int(c.dist[s])
	}
	return n
}

// makeHeader run-length encodes the code lengths (RFC 1951 §3.2.7), builds
// the code-length code, and returns the header size in bits.
func (c *dynCode) makeHeader(h *huffman) int {
	c.hlit = numLitLen
	for c.hlit > 257 && c.lit[c.hlit-1] == 0 {
		c.hlit--
	}
	c.hdist = numDist
	for c.hdist > 1 && c.dist[c.hdist-1] == 0 {
		c.hdist--
	}
	c.rle = c.rle[:0]
	c.clFreq = [numCodeLen]uint32{}
	emit := func(sym, x int) {
		c.rle = append(c.rle, uint16(sym|x<<5))
		c.clFreq[sym]++
	}
	total := c.hlit + c.hdist
	at := func(i int) uint8 {
		if i < c.hlit {
			return c.lit[i]
		}
		return c.dist[i-c.hlit]
	}
	for i := 0; i < total; {
		v := at(i)
		run := 1
		for i+run < total && at(i+run) == v {
			run++
		}
		i += run
		if v == 0 {
			for run >= 11 {
				r := min(run, 138)
				emit(18, r-11)
				run -= r
			}
			if run >= 3 {
				emit(17, run-3)
				run = 0
			}
		} else {
			emit(int(v), 0)
			run--
			for run >= 3 {
				r := min(run, 6)
				emit(16, r-3)
				run -= r
			}
		}
		for ; run > 0; run-- {
			emit(int(v), 0)
		}
	}
	h.build(c.clFreq[:], c.cl[:], maxCLBits)
	c.hclen = numCodeLen
	for c.hclen > 4 && c.cl[clOrder[c.hclen-1]] == 0 {
		c.hclen--
	}
	n := 3 + 5 + 5 + 4 + 3*c.hclen
	for s, f := range c.clFreq {
		n += int(f) * int(c.cl[s])
	}
	n += 2*int(c.clFreq[16]) + 3*int(c.clFreq[17]) + 7*int(c.clFreq[18])
	return n
}

// writeHeader writes the block header and the code.
func (w *bitWriter) writeDynHeader(c *dynCode, final bool) {
	canonical(c.litCode[:], c.lit[:])
	canonical(c.dstCode[:], c.dist[:])
	canonical(c.clCode[:], c.cl[:])
	h := uint64(4)
	if final {
		h = 5
	}
	w.header = w.pos()
	w.bits(h, 3)
	w.bits(uint64(c.hlit-257)|uint64(c.hdist-1)<<5|uint64(c.hclen-4)<<10, 14)
	for _, s := range clOrder[:c.hclen] {
		w.bits(uint64(c.cl[s]), 3)
	}
	for _, r := range c.rle {
		s := r & 31
		w.bits(uint64(c.clCode[s]), uint(c.cl[s]))
		switch s {
		case 16:
			w.bits(uint64(r>>5), 2)
		case 17:
			w.bits(uint64(r>>5), 3)
		case 18:
			w.bits(uint64(r>>5), 7)
		}
	}
}

// writeTokens writes the tokens and the end of block with the given codes.
// A length or a distance goes out with its extra bits in one piece; the
// bit buffer stays in registers and takes 32 bits at a time.
func (w *bitWriter) writeTokens(ts []token, litCode []uint16, litLen []uint8, distCode []uint16, distLen []uint8) {
	litCode, litLen = litCode[:numLitLen], litLen[:numLitLen]
	distCode, distLen = distCode[:numDist], distLen[:numDist]
	acc, nb, n, dst := w.acc, w.nbits, w.n, w.dst
	for _, t := range ts {
		if t < matchFlag {
			c := uint8(t)
			acc |= uint64(litCode[c]) << nb
			nb += uint(litLen[c])
		} else {
			l := uint32(t) >> 16 & 0xff
			ls := lenSym[l]
			s := 257 + int(ls)
			cl := uint(litLen[s])
			acc |= (uint64(litCode[s]) | uint64(l-uint32(lenBase[ls&31]))<<cl) << nb
			nb += cl + uint(lenExtra[l])
			if nb >= 32 {
				if n+4 > len(dst) {
					w.overflow = true
					return
				}
				binary.LittleEndian.PutUint32(dst[n:], uint32(acc))
				n += 4
				acc >>= 32
				nb -= 32
			}
			d := uint32(t) & 0xffff
			ds, dx := distSym(d)
			ds %= numDist
			cd := uint(distLen[ds])
			acc |= (uint64(distCode[ds]) | uint64(d-uint32(distBase[ds]))<<cd) << nb
			nb += cd + uint(dx)
		}
		if nb >= 32 {
			if n+4 > len(dst) {
				w.overflow = true
				return
			}
			binary.LittleEndian.PutUint32(dst[n:], uint32(acc))
			n += 4
			acc >>= 32
			nb -= 32
		}
	}
	w.acc, w.nbits, w.n = acc, nb, n
	w.bits(uint64(litCode[endOfBlock]), uint(litLen[endOfBlock]))
}

// writeFixed writes the tokens as a block with the fixed code.
func (w *bitWriter) writeFixed(ts []token, final bool) {
	h := uint64(2)
	if final {
		h = 3
	}
	w.header = w.pos()
	w.bits(h, 3)
	w.writeTokens(ts, fixedLit[:], fixedLitLen[:], fixedDist[:], fixedDistLen[:])
}

var fixedDistLen = [32]uint8{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}

// log2Frac[m] is 256·log2(1 + m/256), rounded.
var log2Frac [256]uint16

func init() {
	for m := range log2Frac {
		log2Frac[m] = uint16(math.Round(256 * math.Log2(1+float64(m)/256)))
	}
}

// log2Fix is 256·log2(x) for x ≥ 1, with 8 bits of mantissa.
func log2Fix(x uint32) int {
	n := bits.Len32(x) - 1
	var m uint32
	if n >= 8 {
		m = x >> uint(n-8) & 0xff
	} else {
		m = x << uint(8-n) & 0xff
	}
	return n<<8 + int(log2Frac[m])
}

// entropy is the Shannon bound of the block's symbols in bits, extra bits
// included: no Huffman code makes the symbols smaller.
func (e *Encoder) entropy() int {
	b := &e.blk
	total := 0
	ll := log2Fix(uint32(len(e.tokens) + 1))
	for _, f := range b.lit {
		if f != 0 {
			total += int(f) * (ll - log2Fix(f))
		}
	}
	if b.matches > 0 {
		ld := log2Fix(uint32(b.matches))
		for _, f := range b.dist {
			if f != 0 {
				total += int(f) * (ld - log2Fix(f))
			}
		}
	}
	return total>>8 + b.extra
}

// setModel sets the costs that estimate the block's growth from its
// statistics: each symbol's rounded self-information, unseen symbols one
// bit more than the rarest possible.
func (e *Encoder) setModel() {
	b := &e.blk
	ll := log2Fix(uint32(len(e.tokens) + 1))
	unseen := uint8(min(maxBits, (ll+255)>>8+1))
	for s, f := range b.lit {
		c := unseen
		if f != 0 {
			c = uint8(min(max((ll-log2Fix(f)+128)>>8, 1), maxBits))
		}
		e.mLit[s] = c
	}
	ld := log2Fix(uint32(max(b.matches, 1)))
	for s, f := range b.dist {
		c := unseen
		if f != 0 {
			c = uint8(min(max((ld-log2Fix(f)+128)>>8, 1), maxBits))
		}
		e.mDist[s] = c + distExtra[s]
	}
	for l := range e.mLen {
		e.mLen[l] = e.mLit[257+int(lenSym[l])] + lenExtra[l]
	}
}

package lzma

// rangeEncoder is LZMA's binary range coder writing into a fixed buffer.
//
// The stream's length after a flush is known at every point: each byte
// shifted out of low adds one to n+cacheSize, and the flush adds 4 more (five
// shifts, the last cache byte is never written). That is what lets
// CompressDestSize stop exactly at its budget: size() is the flushed length
// now, and a symbol's cost in bytes is the number of shifts it causes, which
// depends on the range alone (see sim).
type rangeEncoder struct {
	low       uint64
	rng       uint32
	cache     byte
	cacheSize int // pending bytes: the cache byte and the 0xFF bytes after it
	out       []byte
	n         int
}

func (r *rangeEncoder) reset(out []byte) {
	r.low, r.rng = 0, 0xFFFFFFFF
	r.cache, r.cacheSize = 0, 1
	r.out, r.n = out, 0
}

// size is the length the stream would have if it were flushed now.
func (r *rangeEncoder) size() int { return r.n + r.cacheSize + 4 }

func (r *rangeEncoder) shiftLow() {
	if uint32(r.low) < 0xFF000000 || r.low >= 1<<32 {
		carry := byte(r.low >> 32)
		b := r.cache + carry
		for ; r.cacheSize > 0; r.cacheSize-- {
			r.out[r.n] = b
			r.n++
			b = 0xFF + carry
		}
		r.cache = byte(r.low >> 24)
	}
	r.cacheSize++
	r.low = uint64(uint32(r.low) << 8)
}

// step codes one binary decision b with probability v (of a 0) on low and
// rng and returns them; the caller adapts the probability (see adapted) and
// normalizes. It inlines, so the loops below keep low and rng in registers,
// and its one condition compiles to conditional moves (literal bits are
// unpredictable). One shift always restores the range: a probability is at
// least 31/2048, so a single decision never shrinks the range by more than
// 2^8.
func step(low uint64, rng, v, b uint32) (uint64, uint32) {
	bound := (rng >> probBits) * v
	nl, nr := low+uint64(bound), rng-bound
	if b == 0 {
		nl, nr = low, bound
	}
	return nl, nr
}

// adapted[b<<probBits | v] is probability v adapted after coding b: one
// load instead of the arithmetic, off the range's critical path.
var adapted = func() (t [2 << probBits]uint16) {
	for v := range uint32(probOne) {
		t[v] = uint16(v + (probOne-v)>>moveBits)
		t[probOne+v] = uint16(v - v>>moveBits)
	}
	return
}()

const adaptMask = 2<<probBits - 1

func adapt(v, b uint32) uint16 { return adapted[(b<<probBits|v)&adaptMask] }

// norm shifts a byte out; rare, so out of line.
//
//go:noinline
func (r *rangeEncoder) norm(low uint64, rng uint32) (uint64, uint32) {
	r.low, r.rng = low, rng<<8
	r.shiftLow()
	return r.low, r.rng
}

// bit codes one binary decision with probability *p and adapts *p.
func (r *rangeEncoder) bit(p *uint16, b uint32) {
	v := uint32(*p)
	*p = adapt(v, b)
	low, rng := step(r.low, r.rng, v, b)
	if rng < rangeTop {
		low, rng = r.norm(low, rng)
	}
	r.low, r.rng = low, rng
}

// direct codes the n low bits of v, most significant first, at probability
// one half.
func (r *rangeEncoder) direct(v uint32, n uint32) {
	low, rng := r.low, r.rng
	v <<= (32 - n) & 31
	for ; n > 0; n-- {
		rng >>= 1
		low += uint64(rng & (0 - v>>31))
		v <<= 1
		if rng < rangeTop {
			low, rng = r.norm(low, rng)
		}
	}
	r.low, r.rng = low, rng
}

// tree codes the n-bit symbol v (1 ≤ n ≤ 8) with a bit tree rooted at
// probs[1]. The bits are taken from the top of v shifted up, which saves a
// variable shift per bit.
func (r *rangeEncoder) tree(probs []uint16, v uint32, n uint32) {
	low, rng := r.low, r.rng
	m := uint32(1)
	v <<= (32 - n) & 31
	for ; n > 0; n-- {
		b := v >> 31
		v <<= 1
		pv := uint32(probs[m])
		probs[m] = adapt(pv, b)
		low, rng = step(low, rng, pv, b)
		if rng < rangeTop {
			low, rng = r.norm(low, rng)
		}
		m = m<<1 | b
	}
	r.low, r.rng = low, rng
}

// reverseTree codes the n-bit symbol v least significant bit first.
func (r *rangeEncoder) reverseTree(probs []uint16, v uint32, n uint32) {
	low, rng := r.low, r.rng
	m := uint32(1)
	for ; n > 0; n-- {
		b := v & 1
		v >>= 1
		pv := uint32(probs[m])
		probs[m] = adapt(pv, b)
		low, rng = step(low, rng, pv, b)
		if rng < rangeTop {
			low, rng = r.norm(low, rng)
		}
		m = m<<1 | b
	}
	r.low, r.rng = low, rng
}

// literal codes a literal: a 0 with probability *isMatch, then byte c with
// the literal coder probs; after a match, with the byte at rep0 as context
// (a matched literal): while c's bits agree with match's, they are coded
// with probabilities of their own.
func (r *rangeEncoder) literal(isMatch *uint16, probs []uint16, c uint32, matched bool, match uint32) {
	low, rng := r.low, r.rng
	v := uint32(*isMatch)
	*isMatch = adapt(v, 0)
	rng = (rng >> probBits) * v
	if rng < rangeTop {
		low, rng = r.norm(low, rng)
	}
	sym := c | 0x100
	probs = probs[:literalCoderSize]
	if !matched {
		for sym < 0x10000 {
			i := (sym >> 8) & 0xFF
			b := (sym >> 7) & 1
			pv := uint32(probs[i])
			probs[i] = adapt(pv, b)
			low, rng = step(low, rng, pv, b)
			if rng < rangeTop {
				low, rng = r.norm(low, rng)
			}
			sym <<= 1
		}
	} else {
		offs := uint32(0x100)
		for sym < 0x10000 {
			match <<= 1
			mb := match & offs
			b := (sym >> 7) & 1
			i := offs + mb + sym>>8
			pv := uint32(probs[i])
			probs[i] = adapt(pv, b)
			low, rng = step(low, rng, pv, b)
			if rng < rangeTop {
				low, rng = r.norm(low, rng)
			}
			sym <<= 1
			offs &^= mb ^ b<<8
		}
	}
	r.low, r.rng = low, rng
}

func (r *rangeEncoder) flush() {
	for range 5 {
		r.shiftLow()
	}
}

// sim follows the range alone through a symbol without touching the
// probabilities or the output, counting the bytes the symbol would emit.
// Within one LZMA symbol no probability is used twice, so reading the
// probabilities unadapted gives the exact ranges the real coding will see.
type sim struct {
	rng    uint32
	shifts int
}

func (s *sim) bit(p uint16, b uint32) {
	bound := (s.rng >> probBits) * uint32(p)
	if b == 0 {
		s.rng = bound
	} else {
		s.rng -= bound
	}
	if s.rng < rangeTop {
		s.rng <<= 8
		s.shifts++
	}
}

func (s *sim) direct(n uint32) {
	for ; n > 0; n-- {
		s.rng >>= 1
		if s.rng < rangeTop {
			s.rng <<= 8
			s.shifts++
		}
	}
}

func (s *sim) tree(probs []uint16, v uint32, n uint32) {
	m := uint32(1)
	for n > 0 {
		n--
		b := (v >> n) & 1
		s.bit(probs[m], b)
		m = m<<1 | b
	}
}

func (s *sim) reverseTree(probs []uint16, v uint32, n uint32) {
	m := uint32(1)
	for ; n > 0; n-- {
		b := v & 1
		v >>= 1
		s.bit(probs[m], b)
		m = m<<1 | b
	}
}

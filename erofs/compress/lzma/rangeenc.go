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
// rng and returns them with the adapted probability; the caller normalizes.
// It is branch-free (literal bits are unpredictable) and inlines, so the
// loops below keep low and rng in registers. One shift always restores the
// range: a probability is at least 31/2048, so a single decision never
// shrinks the range by more than 2^8.
func step(low uint64, rng, v, b uint32) (uint64, uint32, uint32) {
	mask := 0 - b
	bound := (rng >> probBits) * v
	return low + uint64(bound&mask), bound + (rng-2*bound)&mask,
		v + ((probOne-v)>>moveBits)&^mask - (v>>moveBits)&mask
}

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
	low, rng, v := step(r.low, r.rng, uint32(*p), b)
	*p = uint16(v)
	if rng < rangeTop {
		low, rng = r.norm(low, rng)
	}
	r.low, r.rng = low, rng
}

// direct codes the n low bits of v, most significant first, at probability
// one half.
func (r *rangeEncoder) direct(v uint32, n uint32) {
	low, rng := r.low, r.rng
	for n > 0 {
		n--
		rng >>= 1
		low += uint64(rng & (0 - (v>>n)&1))
		if rng < rangeTop {
			low, rng = r.norm(low, rng)
		}
	}
	r.low, r.rng = low, rng
}

// tree codes the n-bit symbol v with a bit tree rooted at probs[1].
func (r *rangeEncoder) tree(probs []uint16, v uint32, n uint32) {
	low, rng := r.low, r.rng
	m := uint32(1)
	for n > 0 {
		n--
		b := (v >> n) & 1
		var pv uint32
		low, rng, pv = step(low, rng, uint32(probs[m]), b)
		probs[m] = uint16(pv)
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
		var pv uint32
		low, rng, pv = step(low, rng, uint32(probs[m]), b)
		probs[m] = uint16(pv)
		if rng < rangeTop {
			low, rng = r.norm(low, rng)
		}
		m = m<<1 | b
	}
	r.low, r.rng = low, rng
}

// literal codes byte c with the literal coder probs; after a match, with
// the byte at rep0 as context (a matched literal): while c's bits agree
// with match's, they are coded with probabilities of their own.
func (r *rangeEncoder) literal(probs []uint16, c uint32, matched bool, match uint32) {
	low, rng := r.low, r.rng
	sym := c | 0x100
	probs = probs[:literalCoderSize]
	if !matched {
		for sym < 0x10000 {
			i := sym >> 8
			var pv uint32
			low, rng, pv = step(low, rng, uint32(probs[i&0xFF]), (sym>>7)&1)
			probs[i&0xFF] = uint16(pv)
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
			var pv uint32
			low, rng, pv = step(low, rng, uint32(probs[i]), b)
			probs[i] = uint16(pv)
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

package lzma

import (
	"encoding/binary"
	"fmt"
)

// Decoder decodes MicroLZMA streams the way the Linux kernel's full
// ("exact") decoding does (lib/xz, xz_dec_microlzma_run with
// uncomp_size_is_exact): the stream must produce exactly the output asked
// for, every byte of it must be used, no match may run past the end of the
// output or reach before its start or beyond the dictionary, and the range
// coder must end clean (code 0 after its final normalization). Any
// properties byte the kernel takes (lc+lp ≤ 4) is accepted.
//
// A Decoder holds the model (about 28 KiB) and can be reused; it is not safe
// for concurrent use.
type Decoder struct {
	dict uint32
	p    probs
}

// NewDecoder returns a decoder for streams written with a dictionary of
// dictSize bytes (MinDictSize … MaxDictSize).
func NewDecoder(dictSize int) (*Decoder, error) {
	if dictSize < MinDictSize || dictSize > MaxDictSize {
		return nil, fmt.Errorf("lzma: dictionary size %d: want %d … %d", dictSize, MinDictSize, MaxDictSize)
	}
	return &Decoder{dict: uint32(dictSize)}, nil
}

// Decompress decodes src into exactly len(dst) bytes with a new Decoder.
func Decompress(dst, src []byte, dictSize int) error {
	d, err := NewDecoder(dictSize)
	if err != nil {
		return err
	}
	return d.Decode(dst, src)
}

type rangeDecoder struct {
	rng, code uint32
	in        []byte
	pos       int // may run past len(in): the missing bytes read as 0
}

func (r *rangeDecoder) normalize() {
	if r.rng < rangeTop {
		r.rng <<= 8
		var b byte
		if r.pos < len(r.in) {
			b = r.in[r.pos]
		}
		r.pos++
		r.code = r.code<<8 | uint32(b)
	}
}

func (r *rangeDecoder) bit(p *uint16) uint32 {
	r.normalize()
	v := uint32(*p)
	bound := (r.rng >> probBits) * v
	if r.code < bound {
		r.rng = bound
		*p = uint16(v + (probOne-v)>>moveBits)
		return 0
	}
	r.rng -= bound
	r.code -= bound
	*p = uint16(v - v>>moveBits)
	return 1
}

func (r *rangeDecoder) tree(probs []uint16, n uint32) uint32 {
	m := uint32(1)
	for range n {
		m = m<<1 | r.bit(&probs[m])
	}
	return m - 1<<n
}

func (r *rangeDecoder) reverseTree(probs []uint16, n uint32) uint32 {
	m, v := uint32(1), uint32(0)
	for i := range n {
		b := r.bit(&probs[m])
		m = m<<1 | b
		v |= b << i
	}
	return v
}

func (r *rangeDecoder) direct(n uint32) uint32 {
	var v uint32
	for range n {
		r.normalize()
		r.rng >>= 1
		r.code -= r.rng
		mask := 0 - r.code>>31 // all ones if the subtraction wrapped: bit 0
		r.code += r.rng & mask
		v = v<<1 | (mask + 1)
	}
	return v
}

func (r *rangeDecoder) length(l *lenProbs, ps uint32) int {
	if r.bit(&l.choice) == 0 {
		return matchLenMin + int(r.tree(l.low[ps<<3:ps<<3+8], 3))
	}
	if r.bit(&l.choice2) == 0 {
		return matchLenMin + lenLowSyms + int(r.tree(l.mid[ps<<3:ps<<3+8], 3))
	}
	return matchLenMin + lenLowSyms + lenMidSyms + int(r.tree(l.high[:], 8))
}

// Decode decodes the MicroLZMA stream src into exactly len(dst) bytes. It
// returns an error wrapping ErrCorrupt for any stream the kernel would
// refuse, and never panics.
//
// It is long on purpose: the decode loop stays in one function so that
// the compiler keeps its state in registers.
func (d *Decoder) Decode(dst, src []byte) error {
	if len(src) < 5 {
		return fmt.Errorf("%w: %d bytes, shorter than the 5-byte header", ErrCorrupt, len(src))
	}
	props := ^src[0]
	if props >= 9*5*5 {
		return fmt.Errorf("%w: properties byte %#x", ErrCorrupt, props)
	}
	lc, lp, pb := uint32(props%9), uint32(props/9%5), uint32(props/45)
	if lc+lp > 4 {
		return fmt.Errorf("%w: lc %d + lp %d > 4", ErrCorrupt, lc, lp)
	}
	p := &d.p
	p.reset(1 << (lc + lp))
	pbMask, lpMask := uint32(1)<<pb-1, uint32(1)<<lp-1
	rc := rangeDecoder{rng: 0xFFFFFFFF, code: binary.BigEndian.Uint32(src[1:5]), in: src, pos: 5}
	var state uint32
	var reps [numReps]uint32
	pos := 0
	for pos < len(dst) {
		if rc.pos > len(src) {
			return fmt.Errorf("%w: input ends at output byte %d of %d", ErrCorrupt, pos, len(dst))
		}
		ps := uint32(pos) & pbMask
		if rc.bit(&p.isMatch[state<<posBitsMax|ps]) == 0 {
			var prev uint32
			if pos > 0 {
				prev = uint32(dst[pos-1])
			}
			off := ((uint32(pos)&lpMask)<<lc + prev>>(8-lc)) * literalCoderSize
			probs := p.literal[off : off+literalCoderSize]
			sym := uint32(1)
			if state < 7 {
				for sym < 0x100 {
					sym = sym<<1 | rc.bit(&probs[sym])
				}
			} else {
				// After a match rep0 is a distance already checked.
				match := uint32(dst[pos-int(reps[0])-1]) << 1
				offs := uint32(0x100)
				for sym < 0x100 {
					mb := match & offs
					match <<= 1
					b := rc.bit(&probs[offs+mb+sym])
					sym = sym<<1 | b
					if b != 0 {
						offs &= mb
					} else {
						offs &^= mb
					}
				}
			}
			dst[pos] = byte(sym)
			pos++
			state = stateLiteral(state)
			continue
		}
		var length int
		if rc.bit(&p.isRep[state]) != 0 {
			if rc.bit(&p.isRepG0[state]) == 0 {
				if rc.bit(&p.isRep0Long[state<<posBitsMax|ps]) == 0 {
					if reps[0] >= uint32(pos) || reps[0] >= d.dict {
						return fmt.Errorf("%w: distance %d at output byte %d", ErrCorrupt, reps[0]+1, pos)
					}
					dst[pos] = dst[pos-int(reps[0])-1]
					pos++
					state = stateShortRep(state)
					continue
				}
			} else {
				var dist uint32
				if rc.bit(&p.isRepG1[state]) == 0 {
					dist = reps[1]
				} else {
					if rc.bit(&p.isRepG2[state]) == 0 {
						dist = reps[2]
					} else {
						dist = reps[3]
						reps[3] = reps[2]
					}
					reps[2] = reps[1]
				}
				reps[1] = reps[0]
				reps[0] = dist
			}
			length = rc.length(&p.repLen, ps)
			state = stateRep(state)
		} else {
			reps[3], reps[2], reps[1] = reps[2], reps[1], reps[0]
			length = rc.length(&p.matchLen, ps)
			state = stateMatch(state)
			slot := rc.tree(p.distSlot[distState(length)][:], 6)
			dist := slot
			if slot >= distModelStart {
				footer := slot>>1 - 1
				dist = (2 | slot&1) << footer
				if slot < distModelEnd {
					dist += rc.reverseTree(p.distSpec[dist-slot:], footer)
				} else {
					dist += rc.direct(footer-alignBits) << alignBits
					dist += rc.reverseTree(p.align[:], alignBits)
				}
			}
			reps[0] = dist
		}
		dist := reps[0]
		if dist >= uint32(pos) || dist >= d.dict {
			return fmt.Errorf("%w: distance %d at output byte %d", ErrCorrupt, uint64(dist)+1, pos)
		}
		if length > len(dst)-pos {
			return fmt.Errorf("%w: match of %d bytes at output byte %d runs past the end (%d)", ErrCorrupt, length, pos, len(dst))
		}
		from := pos - int(dist) - 1
		if int(dist)+1 >= length {
			copy(dst[pos:pos+length], dst[from:from+length])
		} else {
			for i := range length {
				dst[pos+i] = dst[from+i]
			}
		}
		pos += length
	}
	rc.normalize()
	switch {
	case rc.pos > len(src):
		return fmt.Errorf("%w: input ends before the stream (%d bytes)", ErrCorrupt, len(src))
	case rc.pos < len(src):
		return fmt.Errorf("%w: %d bytes left after %d bytes of output", ErrCorrupt, len(src)-rc.pos, len(dst))
	case rc.code != 0:
		return fmt.Errorf("%w: range coder not finished cleanly", ErrCorrupt)
	}
	return nil
}

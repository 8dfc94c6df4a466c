package lzma

import (
	"encoding/binary"
	"math/bits"
)

// hashChain is the match finder: heads for 2-, 3- and 4-byte sequences and a
// chain linking each position to the previous one with the same 4-byte hash.
//
// The 2- and 3-byte heads are verified by one compare each: short matches at
// small distances, which LZMA codes cheaply, cost one lookup each. The tables
// are small on purpose: the encoder's speed is bound by cache misses.
//
// Positions are stored as base+pos. Each call starts base past every
// position stored before, so entries of earlier calls read as out of range
// and the tables never need clearing between calls.
type hashChain struct {
	head2 []uint32
	head3 []uint32
	head4 []uint32
	chain []uint32
	maskC uint32
	shift uint32 // 32 - log2(len(head4))

	base   uint32
	dict   uint32
	depth  int
	nice   int
	next   int // next position to insert
	src    []byte
	budget int    // output budget of the call, a hint of how far it reaches
	window uint32 // largest usable distance: min(dict, len(chain))
}

const (
	hash2Bits    = 10
	hash3Bits    = 12
	hash4MinBits = 12
	hash4MaxBits = 20
)

type match struct {
	length int
	dist   uint32 // distance - 1
}

func (h *hashChain) init(dict, depth, nice int) {
	h.dict, h.depth, h.nice = uint32(dict), depth, nice
	b4 := min(max(bits.Len32(uint32(dict))-4, hash4MinBits), hash4MaxBits)
	h.head2 = make([]uint32, 1<<hash2Bits)
	h.head3 = make([]uint32, 1<<hash3Bits)
	h.head4 = make([]uint32, 1<<b4)
}

// reset prepares a call over src: the chain covers the smaller of the
// dictionary and src (rounded up to a power of two) and only grows.
func (h *hashChain) reset(src []byte) {
	need := min(len(src), int(h.dict))
	if need > len(h.chain) {
		n := 1 << bits.Len(uint(need-1))
		h.chain = make([]uint32, n)
		h.maskC = uint32(n - 1)
	}
	h.window = min(h.dict, uint32(len(h.chain))-1)
	// The 4-byte table in use scales with what this call can cover:
	// about 16 positions per head. Entries of earlier calls are out of
	// range whatever the mask was, so the size may change between calls.
	span := min(len(src), int(h.dict), 8*h.budget)
	b4 := min(max(bits.Len(uint(span))-4, hash4MinBits), bits.Len(uint(len(h.head4)))-1)
	h.shift = uint32(32 - b4)
	if uint64(h.base)+uint64(len(src))+2 >= 1<<32 || h.base == 0 {
		clear(h.head2)
		clear(h.head3)
		clear(h.head4)
		clear(h.chain)
		h.base = 1
	}
	h.src = src
	h.next = 0
}

// done moves base past this call's positions.
func (h *hashChain) done() {
	h.base += uint32(len(h.src)) + 1
	h.src = nil
}

func (h *hashChain) hashes(v uint32) (h2, h3, h4 uint32) {
	h2 = ((v & 0xFFFF) * 0x9E3779B1) >> (32 - hash2Bits)
	h3 = ((v << 8) * 0x9E3779B1) >> (32 - hash3Bits)
	h4 = (v * 2654435761) >> h.shift
	return
}

// skip inserts positions up to end (exclusive) without searching.
func (h *hashChain) skip(end int) {
	src := h.src
	last := min(end, len(src)-3)
	for p := h.next; p < last; p++ {
		v := binary.LittleEndian.Uint32(src[p:])
		h2, h3, h4 := h.hashes(v)
		abs := h.base + uint32(p)
		h.head2[h2] = abs
		h.head3[h3] = abs
		h.chain[abs&h.maskC] = h.head4[h4]
		h.head4[h4] = abs
	}
	h.next = max(h.next, end)
}

// find inserts pos (which must be h.next) and returns the matches found
// there, longest last, each longer than the one before. The longest is at
// most nice bytes unless it reaches nice, then it is extended as far as it
// goes (at most matchLenMax).
func (h *hashChain) find(pos int, ms []match) int {
	src := h.src
	h.next = pos + 1
	avail := len(src) - pos
	if avail < 4 {
		return 0
	}
	limit := min(avail, h.nice)
	v := binary.LittleEndian.Uint32(src[pos:])
	h2, h3, h4 := h.hashes(v)
	abs := h.base + uint32(pos)
	d2 := abs - h.head2[h2]
	d3 := abs - h.head3[h3]
	cand := h.head4[h4]
	h.head2[h2] = abs
	h.head3[h3] = abs
	h.chain[abs&h.maskC] = cand
	h.head4[h4] = abs

	// Distances 1…maxd are usable: inside this call, the dictionary and
	// the chain.
	maxd := min(uint32(pos), h.window)
	cur := src[pos:]
	n, best := 0, 1
	if d2-1 < maxd && binary.LittleEndian.Uint16(src[pos-int(d2):]) == uint16(v) {
		best = 2
		ms[0] = match{2, d2 - 1}
		n = 1
	}
	if d2 != d3 && d3-1 < maxd && binary.LittleEndian.Uint32(src[pos-int(d3):])&0xFFFFFF == v&0xFFFFFF {
		best = 3
		ms[n] = match{3, d3 - 1}
		n++
		d2 = d3
	}
	if n > 0 {
		best = extend(src, pos-int(d2), pos, best, limit)
		ms[n-1].length = best
		if best == limit {
			return h.finish(ms, n, pos, limit)
		}
	}
	best = max(best, 3)
	// A candidate can only be longer if the four bytes ending at the
	// current best length agree: one compare rejects most of them.
	tail := binary.LittleEndian.Uint32(cur[best-3:])
	for depth := h.depth; depth > 0; depth-- {
		d := abs - cand
		if d-1 >= maxd {
			break
		}
		next := h.chain[cand&h.maskC]
		mp := pos - int(d)
		if binary.LittleEndian.Uint32(src[mp+best-3:]) == tail {
			if l := extend(src, mp, pos, 0, limit); l > best {
				best = l
				ms[n] = match{l, d - 1}
				n++
				if l == limit {
					return h.finish(ms, n, pos, limit)
				}
				tail = binary.LittleEndian.Uint32(cur[best-3:])
			}
		}
		cand = next
	}
	return n
}

// finish extends a match that reached the nice length.
func (h *hashChain) finish(ms []match, n, pos, limit int) int {
	if limit == h.nice {
		m := &ms[n-1]
		m.length = extend(h.src, pos-int(m.dist)-1, pos, m.length, min(len(h.src)-pos, matchLenMax))
	}
	return n
}

// extend returns how many bytes agree at a and b (a < b), knowing that the
// first n do, up to limit.
func extend(src []byte, a, b, n, limit int) int {
	for n+8 <= limit {
		x := binary.LittleEndian.Uint64(src[a+n:]) ^ binary.LittleEndian.Uint64(src[b+n:])
		if x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
		n += 8
	}
	for n < limit && src[a+n] == src[b+n] {
		n++
	}
	return n
}

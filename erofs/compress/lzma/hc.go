package lzma

import (
	"encoding/binary"
	"math/bits"
)

// hashChain is the match finder: heads for 3- and 4-byte sequences and a
// chain linking each position to the previous one with the same 4-byte hash.
//
// The 3-byte head is verified by one compare: a short match at a small
// distance, which LZMA codes cheaply, costs one lookup. There is no 2-byte
// head (xz has one): a 2-byte match saves little over two literals, and
// the fast parser, taking one where a literal would let a better match
// start, came out larger on source text with it, and slower.
//
// Positions are stored as base+pos. Each call starts base past every
// position stored before, so entries of earlier calls read as out of range
// and the tables never need clearing between calls.
type hashChain struct {
	head3 *[1 << hash3Bits]uint32
	head4 []uint32
	chain []uint32
	maskC uint32
	mask4 uint32 // the part of head4 in use: 1<<bits - 1

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
	hash3Bits    = 12
	hash4MinBits = 12
	hash4MaxBits = 20
	// hash4Load is log2 of the positions per 4-byte head the table is
	// sized for. Four keeps the chains nearly free of other sequences, so
	// the few candidates the fast levels look at are real ones: 16 per
	// head made level 1 larger and no faster.
	hash4Load = 2
)

type match struct {
	length int
	dist   uint32 // distance - 1
}

func (h *hashChain) init(dict, depth, nice int) {
	h.dict, h.depth, h.nice = uint32(dict), depth, nice
	b4 := min(max(bits.Len32(uint32(dict))-hash4Load, hash4MinBits), hash4MaxBits)
	h.head3 = new([1 << hash3Bits]uint32)
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
	// about 1<<hash4Load positions per head. Entries of earlier calls are out of
	// range whatever the mask was, so the size may change between calls.
	span := min(len(src), int(h.dict), 8*h.budget)
	b4 := min(max(bits.Len(uint(span))-hash4Load, hash4MinBits), bits.Len(uint(len(h.head4)))-1)
	h.mask4 = 1<<b4 - 1
	if uint64(h.base)+uint64(len(src))+2 >= 1<<32 || h.base == 0 {
		clear(h.head3[:])
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

// hashMul spreads a position's bytes over the hash. hash3 is shifted to
// its table's size, so indexing that array needs no bounds check.
const hashMul = 0x9E3779B1

func hash3(v uint32) uint32 { return ((v << 8) * hashMul) >> (32 - hash3Bits) }

// hash4 is the 4-byte hash for the largest table; a call masks it to the
// part in use. The top bits of a 64-bit product depend on every bit of v,
// and a fixed shift keeps the shift-count register free in the loops.
func hash4(v uint32) uint32 { return uint32((uint64(v) * hashMul64) >> (64 - hash4MaxBits)) }

const hashMul64 = 0x9E3779B97F4A7C15

// skip inserts positions up to end (exclusive) without searching. It runs
// for every byte inside a match, so the tables are held in locals: stores
// through slices would otherwise make the compiler reload them from h.
func (h *hashChain) skip(end int) {
	src := h.src
	last := min(end, len(src)-3)
	if p := h.next; p < last {
		head3, head4, chain := h.head3, h.head4, h.chain
		maskC, mask4 := h.maskC, h.mask4
		abs := h.base + uint32(p)
		// v holds the four bytes at p: each byte ranged over is the last
		// of the next position's four, which saves the load's bounds
		// checks.
		v := uint32(src[p])<<8 | uint32(src[p+1])<<16 | uint32(src[p+2])<<24
		for _, c := range src[p+3 : last+3] {
			v = v>>8 | uint32(c)<<24
			head3[hash3(v)] = abs
			h4 := hash4(v) & mask4
			chain[abs&maskC] = head4[h4]
			head4[h4] = abs
			abs++
		}
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
	if len(src)-pos < 4 {
		return 0
	}
	limit := min(len(src)-pos, h.nice)
	v := binary.LittleEndian.Uint32(src[pos:])
	h3, h4 := hash3(v), hash4(v)&h.mask4
	abs := h.base + uint32(pos)
	head4, chain, maskC := h.head4, h.chain, h.maskC
	d3 := abs - h.head3[h3]
	cand := head4[h4]
	h.head3[h3] = abs
	chain[abs&maskC] = cand
	head4[h4] = abs

	// Distances 1…maxd are usable: inside this call, the dictionary and
	// the chain.
	maxd := min(uint32(pos), h.window)
	n, best := 0, 3
	if d3-1 < maxd && binary.LittleEndian.Uint32(src[pos-int(d3):])&0xFFFFFF == v&0xFFFFFF {
		best = extend(src, pos-int(d3), pos, 3, limit)
		ms[0] = match{best, d3 - 1}
		n = 1
		if best == limit {
			return h.finish(ms, n, pos, limit)
		}
	}
	// A candidate can only be longer if the four bytes ending at the
	// current best length agree: one compare rejects most of them.
	tail := binary.LittleEndian.Uint32(src[pos+best-3:])
	for depth := h.depth; depth > 0; depth-- {
		d := abs - cand
		if d-1 >= maxd {
			break
		}
		next := chain[cand&maskC]
		mp := pos - int(d)
		if binary.LittleEndian.Uint32(src[mp+best-3:]) == tail {
			if l := extend(src, mp, pos, 0, limit); l > best {
				best = l
				ms[n] = match{l, d - 1}
				n++
				if l == limit {
					return h.finish(ms, n, pos, limit)
				}
				tail = binary.LittleEndian.Uint32(src[pos+best-3:])
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

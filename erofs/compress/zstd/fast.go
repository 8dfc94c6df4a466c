package zstd

import (
	"encoding/binary"
	"math/bits"
)

// The parser: one hash table of 4- to 6-byte sequences, a repeat-offset
// probe one byte ahead, and a search step that grows through input
// without matches, like zstd's "fast" strategy. Levels 1 and 2 take the
// first match (greedy); from level 3 a match may give way to a longer one
// starting a byte later, and the table and the patience grow with the
// level (levelParams).

const prime5 = 889523592379 // multiplier of the 5-byte hash
const prime6 = 227718039650203

// hashTable maps hashed input to the last position seen and the four
// bytes there (checked without touching the input). Entries store
// position+gen; a frame starts by moving gen past every earlier entry, so
// the table is never cleared between frames (that would cost more than
// compressing a small pcluster).
type hashTable struct {
	t   []tableEntry
	gen uint32
}

type tableEntry struct{ pos, val uint32 }

func (h *hashTable) init(log uint) {
	h.t = make([]tableEntry, 1<<log)
	h.gen = 1
}

// newFrame invalidates all entries of the tables; used is the extent of
// the previous frame's positions.
func (e *Encoder) newFrame(used int) {
	h := &e.hash
	e.chainNext = 0
	if uint64(h.gen)+uint64(used)+1 >= 1<<31 {
		clear(h.t)
		clear(e.chain.head)
		clear(e.chain.prev)
		h.gen = 1
		return
	}
	h.gen += uint32(used) + 1
}

func le32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }
func le64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// matchLen counts equal bytes at a and b (a < b), stopping at end.
func matchLen(src []byte, a, b, end int) int {
	n := 0
	for b+n+8 <= end {
		if x := le64(src, a+n) ^ le64(src, b+n); x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
		n += 8
	}
	for b+n < end && src[a+n] == src[b+n] {
		n++
	}
	return n
}

// parseFast continues the parse at e.ip up to limit; matches end at or
// before end. Each step hashes two positions from one load, like
// klauspost's fast encoder, and steps further the longer it goes without
// a match.
func (e *Encoder) parseFast(src []byte, limit, end int) {
	h := &e.hash
	tbl := h.t
	tmask := uint32(len(tbl) - 1)
	gen := int(h.gen)
	shift := (64 - e.p.hashLog) & 63
	mshift := uint(64-8*e.p.minMatch) & 63
	prime := uint64(prime5)
	if e.p.minMatch == 6 {
		prime = prime6
	}
	window := e.window
	stepShift := e.p.stepShift
	lazy := e.p.lazy
	ip, anchor := e.ip, e.anchor
	rep0, rep1 := e.frep[0], e.frep[1]
	ilimit := min(limit, end-9)
	// The sequences, literals and coder history live in locals here:
	// appends through e would reload them from memory every time.
	seqs, lits, crep := e.seqs, e.lits, e.crep
	emit := func(anchor, start, ml, off int) {
		lits = append(lits, src[anchor:start]...)
		seqs = append(seqs, seq{litLen: uint32(start - anchor), matchLen: uint32(ml), offset: uint32(off)})
		crep.code(&seqs[len(seqs)-1])
	}
	for ip < ilimit {
		cv := le64(src, ip)
		h0 := uint32((cv<<mshift)*prime>>shift) & tmask
		h1 := uint32((cv>>8<<mshift)*prime>>shift) & tmask
		c0, c1 := tbl[h0], tbl[h1]
		tbl[h0] = tableEntry{uint32(ip + gen), uint32(cv)}
		tbl[h1] = tableEntry{uint32(ip + 1 + gen), uint32(cv >> 8)}
		var start, off, ml int
		if r := ip + 1 - rep0; r >= 0 && uint32(cv>>8) == le32(src, r) {
			start, off = ip+1, rep0
			ml = 4 + matchLen(src, r+4, start+4, end)
		} else if o := ip - (int(c0.pos) - gen); uint(o-1) < uint(min(window, ip)) && c0.val == uint32(cv) {
			start, off = ip, o
			ml = 4 + matchLen(src, ip-o+4, ip+4, end)
			if lazy {
				// The match one byte later may be longer.
				if o1 := ip + 1 - (int(c1.pos) - gen); uint(o1-1) < uint(min(window, ip+1)) && c1.val == uint32(cv>>8) {
					if ml1 := 4 + matchLen(src, ip+1-o1+4, ip+5, end); ml1 > ml {
						start, off, ml = ip+1, o1, ml1
					}
				}
			}
		} else if o := ip + 1 - (int(c1.pos) - gen); uint(o-1) < uint(min(window, ip+1)) && c1.val == uint32(cv>>8) {
			start, off = ip+1, o
			ml = 4 + matchLen(src, ip+1-o+4, ip+5, end)
		} else {
			ip += 2 + (ip-anchor)>>(stepShift&63)
			continue
		}
		for start > anchor && start > off && src[start-1] == src[start-1-off] {
			start--
			ml++
		}
		emit(anchor, start, ml, off)
		if off != rep0 {
			rep0, rep1 = off, rep0
		}
		ip = start + ml
		anchor = ip
		if ip < ilimit {
			// Positions inside the match, for later matches.
			p := start + 2
			v := le64(src, p)
			tbl[uint32((v<<mshift)*prime>>shift)&tmask] = tableEntry{uint32(p + gen), uint32(v)}
			p = ip - 2
			v = le64(src, p)
			tbl[uint32((v<<mshift)*prime>>shift)&tmask] = tableEntry{uint32(p + gen), uint32(v)}
		}
		// A match right after a match at the previous offset (repcode
		// with no literals).
		for ip < ilimit && rep1 <= ip && le32(src, ip) == le32(src, ip-rep1) {
			ml = 4 + matchLen(src, ip+4-rep1, ip+4, end)
			emit(ip, ip, ml, rep1)
			rep0, rep1 = rep1, rep0
			ip += ml
			anchor = ip
		}
	}
	e.seqs, e.lits, e.crep = seqs, lits, crep
	e.ip, e.anchor = ip, anchor
	e.frep[0], e.frep[1] = rep0, rep1
	e.parsed = max(e.parsed, min(ip, end))
}

package zstd

import (
	"encoding/binary"
	"math/bits"
)

// The fast parser (levels 1 and 2): one hash table of 5- or 6-byte
// sequences, greedy matches, a repeat-offset probe one byte ahead, and a
// search step that grows through input without matches, like zstd's
// "fast" strategy.

const prime5 = 889523592379 // multiplier of the 5-byte hash
const prime6 = 227718039650203

// hashTable maps hashed input to the last position seen. Entries store
// position+gen; a frame starts by moving gen past every earlier entry, so
// the table is never cleared between frames (it would cost more than
// compressing a small pcluster).
type hashTable struct {
	t   []uint32
	gen uint32
}

func (h *hashTable) init(log uint) {
	h.t = make([]uint32, 1<<log)
	h.gen = 1
}

// newFrame invalidates all entries; used is the extent of the previous
// frame's positions.
func (h *hashTable) newFrame(used int) {
	if uint64(h.gen)+uint64(used)+1 >= 1<<31 {
		clear(h.t)
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
// before end.
func (e *Encoder) parseFast(src []byte, limit, end int) {
	h := &e.hash
	tbl := h.t
	gen := int(h.gen)
	shift := 64 - e.p.hashLog
	mshift := uint(64 - 8*e.p.minMatch)
	mmask := uint64(1)<<(8*e.p.minMatch) - 1
	prime := uint64(prime5)
	if e.p.minMatch == 6 {
		prime = prime6
	}
	hash := func(u uint64) uint32 { return uint32((u << mshift) * prime >> shift) }
	window := e.window
	stepShift := e.p.stepShift
	ip, anchor := e.ip, e.anchor
	rep0, rep1 := e.frep[0], e.frep[1]
	ilimit := min(limit, end-8)
	for ip < ilimit {
		cur := le64(src, ip)
		hv := hash(cur)
		cand := int(tbl[hv]) - gen
		tbl[hv] = uint32(ip + gen)
		var start, off, ml int
		if r := ip + 1 - rep0; r >= 0 && uint32(cur>>8) == le32(src, r) {
			start, off = ip+1, rep0
			ml = 4 + matchLen(src, r+4, start+4, end)
		} else if o := ip - cand; cand >= 0 && o > 0 && o <= window && (cur^le64(src, cand))&mmask == 0 {
			start, off = ip, o
			ml = e.p.minMatch + matchLen(src, cand+e.p.minMatch, ip+e.p.minMatch, end)
			for start > anchor && start > off && src[start-1] == src[start-1-off] {
				start--
				ml++
			}
		} else {
			ip += 1 + (ip-anchor)>>stepShift
			continue
		}
		e.emit(src, anchor, start, ml, off)
		if off != rep0 {
			rep0, rep1 = off, rep0
		}
		ip = start + ml
		anchor = ip
		if ip < ilimit {
			tbl[hash(le64(src, start+2))] = uint32(start + 2 + gen)
			tbl[hash(le64(src, ip-2))] = uint32(ip - 2 + gen)
		}
		// A match right after a match at the previous offset (repcode
		// with no literals).
		for ip < ilimit && rep1 <= ip && le32(src, ip) == le32(src, ip-rep1) {
			ml = 4 + matchLen(src, ip+4-rep1, ip+4, end)
			e.emit(src, ip, ip, ml, rep1)
			rep0, rep1 = rep1, rep0
			tbl[hash(le64(src, ip))] = uint32(ip + gen)
			ip += ml
			anchor = ip
		}
	}
	e.ip, e.anchor = ip, anchor
	e.frep[0], e.frep[1] = rep0, rep1
	e.parsed = max(e.parsed, min(ip, end))
}

// emit appends the sequence (literals src[anchor:start], match ml at off).
func (e *Encoder) emit(src []byte, anchor, start, ml, off int) {
	e.lits = append(e.lits, src[anchor:start]...)
	e.seqs = append(e.seqs, seq{litLen: uint32(start - anchor), matchLen: uint32(ml), offset: uint32(off)})
}

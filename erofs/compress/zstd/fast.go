package zstd

import (
	"encoding/binary"
	"math/bits"
)

// The parser: one hash table of 5-byte sequences, a repeat-offset
// probe one byte ahead, and a search step that grows through input
// without matches, like zstd's "fast" strategy. Levels 1 and 2 take the
// first match (greedy); from level 3 a match may give way to a longer one
// starting a byte later, and the table and the patience grow with the
// level (levelParams).

const prime5 = 889523592379 // multiplier of the 5-byte hash

// fastLog is the size of the fast parser's hash table: 4 Ki entries, 32
// KiB, which stays in the L1 cache with the input it indexes. On source
// code at 4 KiB pclusters a 16 Ki-entry table writes hardly less and is
// slower (it misses the cache on many probes). A constant size lets the
// index be masked instead of checked.
const fastLog = 12

// hashTable maps hashed input to the last position seen and the four
// bytes there (checked without touching the input). Entries store
// position+gen; a frame starts by moving gen past every earlier entry, so
// the table is never cleared between frames (that would cost more than
// compressing a small pcluster).
type hashTable struct {
	t   *[1 << fastLog]tableEntry
	gen uint32
}

type tableEntry struct{ pos, val uint32 }

func (h *hashTable) init() {
	h.t = new([1 << fastLog]tableEntry)
	h.gen = 1
}

// newFrame invalidates all entries of the tables; used is the extent of
// the previous frame's positions.
func (e *Encoder) newFrame(used int) {
	h := &e.hash
	e.chainNext = 0
	if uint64(h.gen)+uint64(used)+1 >= 1<<31 {
		if h.t != nil {
			clear(h.t[:])
		}
		clear(e.chain.head)
		clear(e.chain.prev)
		h.gen = 1
		return
	}
	h.gen += uint32(used) + 1
}

func le32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }
func le64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// matchLen counts equal bytes at a and b (a < b), stopping at end. The
// two are sliced to the same length first, so the loads in the loop need
// no bounds checks.
func matchLen(src []byte, a, b, end int) int {
	s := src[b:end]
	t := src[a:][:len(s)]
	n := 0
	for ; n+8 <= len(s); n += 8 {
		if x := binary.LittleEndian.Uint64(t[n:]) ^ binary.LittleEndian.Uint64(s[n:]); x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
	}
	for ; n < len(s) && t[n] == s[n]; n++ {
	}
	return n
}

// fastHash is the table index of the five bytes at the bottom of v.
func fastHash(v uint64) uint32 {
	return uint32((v<<24)*prime5>>(64-fastLog)) & (1<<fastLog - 1)
}

// parseFast continues the parse at e.ip up to limit; matches end at or
// before end. Each step hashes two positions from one load, like
// klauspost's fast encoder, takes the longer of their matches (the one a
// byte later is often longer: fewer, longer sequences), and steps further
// the longer it goes without a match. Sequences get their match distance
// in offVal; reps.code codes them.
func (e *Encoder) parseFast(src []byte, limit, end int) {
	ip, anchor := e.ip, e.anchor
	ilimit := min(limit, end-9)
	if ip >= ilimit {
		e.parsed = max(e.parsed, min(ip, end))
		return
	}
	tbl := e.hash.t
	gen := int(e.hash.gen)
	window := e.window
	stepShift := e.p.stepShift & 63
	rep0, rep1 := e.frep[0], e.frep[1]
	// Written by index into room made up front (every sequence covers at
	// least 4 bytes; literals get 16 bytes of slack so that a short run is
	// one 16-byte move): the loop keeps fewer values live than appends do.
	ns, nl := len(e.seqs), len(e.lits)
	seqs := grow(e.seqs, (end-ip)/4+2)
	lits := grow(e.lits, ilimit-anchor+16)
	for ip < ilimit {
		cv := le64(src, ip)
		h0, h1 := fastHash(cv), fastHash(cv>>8)
		c0, c1 := tbl[h0], tbl[h1]
		tbl[h0] = tableEntry{uint32(ip + gen), uint32(cv)}
		tbl[h1] = tableEntry{uint32(ip + 1 + gen), uint32(cv >> 8)}
		var start, off, ml int
		if r := ip + 1 - rep0; r >= 0 && uint32(cv>>8) == le32(src, r) {
			start, off = ip+1, rep0
			ml = 4 + matchLen(src, r+4, start+4, end)
		} else if o := ip - (int(c0.pos) - gen); c0.val == uint32(cv) && uint(o-1) < uint(min(window, ip)) {
			start, off = ip, o
			ml = 4 + matchLen(src, ip-o+4, ip+4, end)
			// The match one byte later may be longer.
			if o1 := ip + 1 - (int(c1.pos) - gen); c1.val == uint32(cv>>8) && uint(o1-1) < uint(min(window, ip+1)) {
				if ml1 := 4 + matchLen(src, ip+1-o1+4, ip+5, end); ml1 > ml {
					start, off, ml = ip+1, o1, ml1
				}
			}
		} else if o := ip + 1 - (int(c1.pos) - gen); c1.val == uint32(cv>>8) && uint(o-1) < uint(min(window, ip+1)) {
			start, off = ip+1, o
			ml = 4 + matchLen(src, ip+1-o+4, ip+5, end)
		} else {
			ip += 2 + (ip-anchor)>>stepShift
			continue
		}
		for start > anchor && start > off && src[start-1] == src[start-1-off] {
			start--
			ml++
		}
		l := start - anchor
		if l <= 16 && anchor+16 <= len(src) {
			*(*[16]byte)(lits[nl:]) = *(*[16]byte)(src[anchor:])
		} else {
			copy(lits[nl:], src[anchor:start])
		}
		nl += l
		seqs[ns] = seq{litLen: uint32(l), matchLen: uint32(ml), offVal: uint32(off)}
		ns++
		if off != rep0 {
			rep0, rep1 = off, rep0
		}
		ip = start + ml
		anchor = ip
		if ip >= ilimit {
			break
		}
		// Positions inside the match, for later matches.
		p := start + 2
		v := le64(src, p)
		tbl[fastHash(v)] = tableEntry{uint32(p + gen), uint32(v)}
		p = ip - 2
		v = le64(src, p)
		tbl[fastHash(v)] = tableEntry{uint32(p + gen), uint32(v)}
		// A match right after a match at the previous offset (repcode
		// with no literals).
		for ip < ilimit && rep1 <= ip && le32(src, ip) == le32(src, ip-rep1) {
			ml = 4 + matchLen(src, ip+4-rep1, ip+4, end)
			seqs[ns] = seq{matchLen: uint32(ml), offVal: uint32(rep1)}
			ns++
			rep0, rep1 = rep1, rep0
			ip += ml
			anchor = ip
		}
	}
	e.seqs, e.lits = seqs[:ns], lits[:nl]
	e.ip, e.anchor = ip, anchor
	e.frep[0], e.frep[1] = rep0, rep1
	e.parsed = max(e.parsed, min(ip, end))
}

// grow returns s extended to its capacity, which is at least len(s)+n.
func grow[T any](s []T, n int) []T {
	if need := len(s) + n; cap(s) < need {
		s = append(make([]T, 0, need+need/4), s...)
	}
	return s[:cap(s)]
}

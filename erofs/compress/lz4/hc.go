package lz4

import (
	"math/bits"
	"unsafe"
)

const (
	hcHashLog = 15
	// hcSkipLog: in levels 1–9 the search step is 1 + (literals so far >>
	// hcSkipLog), so long runs without matches are crossed quickly.
	hcSkipLog = 7
	// shortML is the longest match whose length fits in its token.
	shortML = minMatch + 14
	// optMinLevel is the first level of the optimal parser.
	optMinLevel = 10
)

// hcParams are the settings of one level.
type hcParams struct {
	depth      int // candidates examined per search
	window     int // parse window of the optimal parser
	sufficient int // optimal parser: a match this long is taken at once
	nice       int // levels 1–9: a match this long ends the search
	skip       uint
	// full: level 12 searches more positions of the optimal parse (see
	// compressOpt).
	full bool
}

// hcLevels: the depths are C's LZ4HC's (its levels 1 and 2 are the same),
// the nice lengths ours: without them, levels 3–9 made output hardly
// smaller for clearly more chain steps (4 KiB pclusters of Go source).
var hcLevels = [LevelMax + 1]hcParams{
	1:  {depth: 2, nice: 32},
	2:  {depth: 2, nice: 32},
	3:  {depth: 4, nice: 64},
	4:  {depth: 8, nice: 64},
	5:  {depth: 16, nice: 64},
	6:  {depth: 32, nice: 128},
	7:  {depth: 64, nice: 128},
	8:  {depth: 128, nice: 256},
	9:  {depth: 256, nice: 256},
	10: {depth: 64, window: 512, sufficient: 64},
	11: {depth: 256, window: 1024, sufficient: 128},
	12: {depth: 4096, window: 4096, sufficient: 4096, full: true},
}

// hcState is the match finder of levels 1–12: hash chains over a 64 KiB
// window. head holds the biased position of the latest occurrence of each
// hash of 4 bytes; chain, indexed by position modulo 64 Ki, the distance back
// to the previous position with the same hash (MaxDistance: none in reach).
// A chain entry is written whenever its position is inserted, before it can
// be reached, so the chain table needs no clearing between calls.
type hcState struct {
	head  [1 << hcHashLog]uint32
	chain [1 << 16]uint16
	hcParams
	next int // first position not yet inserted

	// Optimal parser state.
	nodes []optNode
	seqs  []optSeq
}

func newHCState(level int) *hcState {
	h := &hcState{hcParams: hcLevels[level]}
	h.skip = hcSkipLog
	if h.nice == 0 {
		h.nice = maxInput // the optimal parser: no early end
		h.skip = 63       // nor skipping
	}
	if h.window > 0 {
		h.nodes = make([]optNode, h.window+1)
		h.seqs = make([]optSeq, h.window+1)
	}
	return h
}

func hcHash(u uint32) uint32 { return (u * 2654435761) >> (32 - hcHashLog) }

// The searches below read src without bounds checks, through sp, the
// address of src[0]. Their positions stay inside src[:limit] (limit <=
// len(src)) as follows:
//   - a position inserted or searched, p, is at most len(src)-mfLimit (the
//     parsers' sn), so its 4 bytes are inside src;
//   - a candidate c lies in [0, p): the chains are entered from head and
//     followed only while p-c <= MaxDistance, and every entry that is not a
//     position of this call lies further back than that (the bias off
//     grows by more than MaxDistance per call; a chain link to an earlier
//     call's position is stored as MaxDistance, which leaves the window
//     with the next step). A candidate's chain slot was written when it
//     was inserted by this call and, being less than 64 Ki back, not
//     overwritten since;
//   - the bytes compared at c end before those compared at p, which end by
//     limit; backwards, both stay at or above max(low, 0) - see findWider.

// insert adds the positions from h.next up to to (exclusive) to the chains.
func (h *hcState) insert(sp unsafe.Pointer, off, to int) {
	if h.next < to {
		h.insertRun(sp, off, to)
	}
}

// insertRun is the loop of insert, a function of its own so that the
// parsers' variables do not crowd its registers.
//
//go:noinline
func (h *hcState) insertRun(sp unsafe.Pointer, off, to int) {
	for p := h.next; p < to; p++ {
		hv := hcHash(ld32(sp, p))
		h.chain[uint16(p)] = uint16(min(p+off-int(h.head[hv]), MaxDistance))
		h.head[hv] = uint32(p + off)
	}
	h.next = max(h.next, to)
}

// search looks for a match from ip on, up to ipLimit (<= len(src)-mfLimit),
// and returns its position with the longest match there that ends by limit
// (ipLimit+minMatch < limit), and its length and distance; ml is 0 if there
// is none. The positions before ip are inserted first; each position
// searched is inserted as it is searched. After ip-anchor bytes without a
// match the step is 1 + (ip-anchor)>>h.skip, and the positions stepped over
// are not inserted. One function for the whole scan, so that a position
// without candidates costs no call.
func (h *hcState) search(sp unsafe.Pointer, off, ip, ipLimit, anchor, limit int) (pos, ml, dist int) {
	h.insert(sp, off, ip)
	for ip <= ipLimit {
		u := ld32(sp, ip)
		hv := hcHash(u)
		c := int(h.head[hv]) - off
		h.chain[uint16(ip)] = uint16(min(ip-c, MaxDistance))
		h.head[hv] = uint32(ip + off)
		h.next = ip + 1
		if ip-c <= MaxDistance {
			best, maxLen := minMatch-1, limit-ip
			// The two bytes that would make a match longer than
			// best are the likeliest to differ; test them first.
			tail := ld16(sp, ip+best-1)
			// Candidates are followed along the chain of c+k, k = 0
			// at first: see the swap below.
			k := 0
			for d := h.depth; ; {
				if ld16(sp, c+best-1) == tail && ld32(sp, c) == u {
					// Extend, 8 bytes at a time.
					a, b := c+minMatch, ip+minMatch
					for {
						if b+8 > limit {
							for b < limit && ld8(sp, a) == ld8(sp, b) {
								a++
								b++
							}
							break
						}
						if x := ld64(sp, a) ^ ld64(sp, b); x != 0 {
							b += bits.TrailingZeros64(x) >> 3
							break
						}
						a += 8
						b += 8
					}
					if l := b - ip; l > best {
						best, ml, dist = l, l, ip-c
						if l == maxLen || l >= h.nice {
							break
						}
						tail = ld16(sp, ip+best-1)
						if h.window > 0 && c+l <= ip {
							// (The optimal parser's levels only:
							// levels 1–9 skip positions, whose
							// links are then missing.)
							// A longer match at c' has c'+j
							// matching c+j for every j < l: c'+j
							// is on the chain of c+j's 4 bytes.
							// Follow the chain among those that
							// jumps furthest (as C's LZ4HC does
							// with chainSwap): the candidates it
							// passes over cannot beat l. Every
							// position before ip is inserted
							// (the optimal parser skips none).
							k = 0
							far := int(h.chain[uint16(c)])
							for j := 1; j <= l-minMatch; j++ {
								if f := int(h.chain[uint16(c+j)]); f > far {
									far, k = f, j
								}
							}
						}
					}
				}
				c -= int(h.chain[uint16(c+k)])
				d--
				if d == 0 || ip-c > MaxDistance || c < 0 {
					break
				}
			}
			if ml > 0 {
				return ip, ml, dist
			}
		}
		step := 1 + (ip-anchor)>>(h.skip&63)
		if step > 1 {
			// Crossing data without matches: skip the positions
			// between, they are not worth indexing either.
			h.next = ip + step
		}
		ip += step
	}
	return ip, 0, 0
}

// findWider looks, among the candidates of position p, for a match longer
// than best when extended backwards down to low (0 <= low <= p) and forwards
// up to limit. It returns the match's start, length and distance; ml is 0 if
// there is none. All positions before p must be inserted.
func (h *hcState) findWider(sp unsafe.Pointer, off, p, low, limit, best int) (start, ml, dist int) {
	if p+minMatch > limit {
		return 0, 0, 0
	}
	u := ld32(sp, p)
	maxBack := p - low
	c := int(h.head[hcHash(u)]) - off
	for d := h.depth; d > 0 && p-c <= MaxDistance; d-- {
		if ld32(sp, c) == u {
			a, b := c+minMatch, p+minMatch
			for {
				if b+8 > limit {
					for b < limit && ld8(sp, a) == ld8(sp, b) {
						a++
						b++
					}
					break
				}
				if x := ld64(sp, a) ^ ld64(sp, b); x != 0 {
					b += bits.TrailingZeros64(x) >> 3
					break
				}
				a += 8
				b += 8
			}
			// A longer match needs best-fwd+1 bytes backwards, lim at
			// most (c-lim >= 0, p-lim >= low). Test the furthest of
			// them before counting: where the best match so far
			// stopped, its copies tend to stop too.
			if fwd, lim := b-p, min(maxBack, c); fwd+lim > best && (fwd > best || ld8(sp, p-(best-fwd+1)) == ld8(sp, c-(best-fwd+1))) {
				// Count backwards, 8 bytes at a time: the highest
				// byte of a little-endian word comes last.
				// Words are read below low as long as they stay in
				// src (c-back >= 8), and the count is cut to lim.
				back := 0
				for back < lim {
					if c-back < 8 {
						for back < lim && ld8(sp, p-back-1) == ld8(sp, c-back-1) {
							back++
						}
						break
					}
					if x := ld64(sp, p-back-8) ^ ld64(sp, c-back-8); x != 0 {
						back = min(back+bits.LeadingZeros64(x)>>3, lim)
						break
					}
					back = min(back+8, lim)
				}
				if l := fwd + back; l > best {
					best, start, ml, dist = l, p-back, l, p-c
					if b == limit || l >= h.nice {
						break
					}
				}
			}
		}
		c -= int(h.chain[uint16(c)])
	}
	return start, ml, dist
}

// hcMatch is a match of the hash-chain parser: the len bytes at pos repeat
// those dist bytes before them. len is 0 for none.
type hcMatch struct{ pos, len, dist int }

// compressHC is the hash-chain parser of levels 1–9. It parses lazily, the
// way C's LZ4HC does, with up to three matches in hand: m1, the next to emit;
// m2, longer, found around m1's end; m3, longer still, around m2's end. A
// match that starts too close behind the one before it replaces it; else
// the one before is cut where the next one starts, but keeps up to shortML
// bytes (a length its token holds) by moving the next one's start on.
// Positions inside matches are inserted but not searched, so a sequence
// costs about two searches. (Parsing as LZ4HC does, rather than with two
// matches in hand, makes 4 KiB pclusters of Go source hold more input for
// a few more chain steps; levels 1 and 2, greedy before, now take as few
// pclusters as C's.)
//
// It is long on purpose: the hot loop stays in one function so that the
// compiler keeps its state in registers.
func (e *Encoder) compressHC(dst, src []byte) (int, int) {
	h := e.hc
	off := e.off
	n := len(src)
	sn := n - mfLimit
	if sn < 1 {
		return finish(dst, 0, src, 0)
	}
	matchLimit := n - lastLiterals
	sp := unsafe.Pointer(unsafe.SliceData(src))
	h.next = 0
	di, anchor := 0, 0
	// put emits the literals before m and m; false: close the block.
	put := func(m hcMatch) bool {
		var ok, full bool
		di, anchor, ok, full = emitSeq(dst, di, src, anchor, m.pos, m.dist, m.len)
		return ok && !full
	}
	// wider looks around p for a match longer than best that starts at
	// low or later.
	wider := func(p, low, best int) (m hcMatch) {
		h.insert(sp, off, p)
		m.pos, m.len, m.dist = h.findWider(sp, off, p, low, matchLimit, best)
		return m
	}
	// keepHead moves m2's start on so that m1, cut where m2 starts, keeps
	// up to shortML bytes and m2 at least minMatch.
	keepHead := func(m1, m2 *hcMatch) {
		k := min(m1.len, shortML, m2.pos-m1.pos+m2.len-minMatch)
		if d := m1.pos + k - m2.pos; d > 0 {
			m2.pos += d
			m2.len -= d
		}
	}
	ipLimit := min(sn, maxLiterals(len(dst)-seqReserve))
	ip := 1
	for {
		// m0 is the first m1 of this step, restored when the matches
		// that replaced it turn out to leave it room.
		var m0, m1, m2, m3 hcMatch
		m1.pos, m1.len, m1.dist = h.search(sp, off, ip, ipLimit, anchor, matchLimit)
		if m1.len == 0 {
			return finish(dst, di, src, anchor)
		}
		// Extend backwards over literals (matches found after a skip).
		for c := m1.pos - m1.dist; m1.pos > anchor && c > 0 && src[m1.pos-1] == src[c-1]; c-- {
			m1.pos--
			m1.len++
		}
		m0 = m1
	search2:
		m2 = hcMatch{}
		if m1.pos+m1.len <= sn {
			m2 = wider(m1.pos+m1.len-2, m1.pos, m1.len)
		}
		if m2.len == 0 {
			if !put(m1) {
				return finish(dst, di, src, anchor)
			}
			goto next
		}
		if m0.pos < m1.pos && m2.pos < m1.pos+m0.len {
			// m1 replaced m0, but m2 starts where m0 would have
			// room: keep m0 before m2 instead.
			m1 = m0
		}
		if m2.pos-m1.pos < 3 {
			// m2 starts too close behind m1: it replaces m1.
			m1 = m2
			goto search2
		}
	search3:
		if m2.pos-m1.pos < shortML {
			keepHead(&m1, &m2)
		}
		m3 = hcMatch{}
		if m2.pos+m2.len <= sn {
			m3 = wider(m2.pos+m2.len-3, m2.pos, m2.len)
		}
		if m3.len == 0 {
			m1.len = min(m1.len, m2.pos-m1.pos)
			if !put(m1) || !put(m2) {
				return finish(dst, di, src, anchor)
			}
			goto next
		}
		if m3.pos < m1.pos+m1.len+3 {
			// m3 leaves m2 less than 3 bytes after m1: m2 goes.
			if m3.pos >= m1.pos+m1.len {
				// m1 is final; m3 continues, m2 (after m1)
				// being what it replaced.
				if d := m1.pos + m1.len - m2.pos; d > 0 {
					m2.pos += d
					m2.len -= d
					if m2.len < minMatch {
						m2 = m3
					}
				}
				if !put(m1) {
					return finish(dst, di, src, anchor)
				}
				m0, m1 = m2, m3
				goto search2
			}
			m2 = m3
			goto search3
		}
		// Three ascending matches: m1 is final, cut where m2 starts.
		if m2.pos < m1.pos+m1.len {
			if m2.pos-m1.pos < shortML {
				m1.len = min(m1.len, shortML)
				keepHead(&m1, &m2)
			}
			m1.len = m2.pos - m1.pos
		}
		if !put(m1) {
			return finish(dst, di, src, anchor)
		}
		m1, m2 = m2, m3
		goto search3
	next:
		ip = anchor
		if ip > sn {
			return finish(dst, di, src, anchor)
		}
		ipLimit = min(sn, anchor+maxLiterals(len(dst)-di-seqReserve))
	}
}

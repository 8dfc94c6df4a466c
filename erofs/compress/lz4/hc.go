package lz4

import "math/bits"

const (
	hcHashLog = 15
	// hcSkipLog: in levels 1–9 the search step is 1 + (literals so far >>
	// hcSkipLog), so long runs without matches are crossed quickly.
	hcSkipLog = 7
	// optMinLevel is the first level of the optimal parser.
	optMinLevel = 10
)

// hcParams are the settings of one level.
type hcParams struct {
	depth      int // candidates examined per search
	lazy       int // positions a match may be deferred by (levels 1–9)
	window     int // parse window of the optimal parser
	sufficient int // optimal parser: a match this long is taken at once
	nice       int // levels 1–9: a match this long ends the search
}

var hcLevels = [LevelMax + 1]hcParams{
	1:  {depth: 2, nice: 32},
	2:  {depth: 4, nice: 32},
	3:  {depth: 8, lazy: 1, nice: 64},
	4:  {depth: 16, lazy: 1, nice: 64},
	5:  {depth: 32, lazy: 1, nice: 64},
	6:  {depth: 64, lazy: 1, nice: 128},
	7:  {depth: 64, lazy: 2, nice: 128},
	8:  {depth: 128, lazy: 2, nice: 256},
	9:  {depth: 256, lazy: 2, nice: 256},
	10: {depth: 64, window: 512, sufficient: 64},
	11: {depth: 256, window: 1024, sufficient: 128},
	12: {depth: 4096, window: 4096, sufficient: 4096},
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
	if h.window > 0 {
		h.nodes = make([]optNode, h.window+1)
		h.seqs = make([]optSeq, h.window+1)
	}
	return h
}

func hcHash(u uint32) uint32 { return (u * 2654435761) >> (32 - hcHashLog) }

// insert adds the positions from h.next up to to (exclusive) to the chains.
func (h *hcState) insert(src []byte, off, to int) {
	for p := h.next; p < to; p++ {
		hv := hcHash(le32(src, p))
		d := p + off - int(h.head[hv])
		if d > MaxDistance {
			d = MaxDistance
		}
		h.chain[p&0xFFFF] = uint16(d)
		h.head[hv] = uint32(p + off)
	}
	if to > h.next {
		h.next = to
	}
}

// find returns the longest match at ip that is longer than best and ends by
// limit, with its distance; ml is 0 if there is none. All positions before ip
// must be inserted, ip itself not.
func (h *hcState) find(src []byte, off, ip, limit, best int) (ml, dist int) {
	maxLen := limit - ip
	if best >= maxLen {
		return 0, 0
	}
	u := le32(src, ip)
	c := int(h.head[hcHash(u)]) - off
	for d := h.depth; d > 0 && ip-c <= MaxDistance; d-- {
		// The byte that would make the match longer than best is the
		// likeliest to differ; test it first.
		if src[c+best] == src[ip+best] && le32(src, c) == u {
			l := minMatch + matchLen(src, c+minMatch, ip+minMatch, limit)
			if l > best {
				best, ml, dist = l, l, ip-c
				if l == maxLen || l >= h.nice && h.nice > 0 {
					break
				}
			}
		}
		c -= int(h.chain[c&0xFFFF])
	}
	return ml, dist
}

// matchLen counts the bytes at a that equal those at b (a < b), up to limit.
func matchLen(src []byte, a, b, limit int) int {
	start := b
	for b+8 <= limit {
		if x := le64(src, a) ^ le64(src, b); x != 0 {
			return b - start + bits.TrailingZeros64(x)>>3
		}
		a += 8
		b += 8
	}
	for b < limit && src[a] == src[b] {
		a++
		b++
	}
	return b - start
}

// compressHC is the hash-chain parser of levels 1–9: greedy, or lazy by one
// or two positions.
func (e *Encoder) compressHC(dst, src []byte) (int, int) {
	h := e.hc
	off := e.off
	n := len(src)
	sn := n - mfLimit
	if sn < 1 {
		return finish(dst, 0, src, 0)
	}
	matchLimit := n - lastLiterals
	h.next = 0
	di, anchor := 0, 0
	ipLimit := min(sn, maxLiterals(len(dst)-seqReserve))
	ip := 1
	for {
		if ip > ipLimit {
			return finish(dst, di, src, anchor)
		}
		h.insert(src, off, ip)
		ml, dist := h.find(src, off, ip, matchLimit, minMatch-1)
		if ml == 0 {
			step := 1 + (ip-anchor)>>hcSkipLog
			if step > 1 {
				// Crossing data without matches: skip the positions
				// between, they are not worth indexing either.
				h.insert(src, off, ip+1)
				h.next = ip + step
			}
			ip += step
			continue
		}
		// Lazy matching: a longer match one or two positions on is worth
		// the literals it costs.
	lazy:
		for k := 1; k <= h.lazy && ip+k <= ipLimit; k++ {
			h.insert(src, off, ip+k)
			if ml2, dist2 := h.find(src, off, ip+k, matchLimit, ml+k-1); ml2 > 0 {
				ip += k
				ml, dist = ml2, dist2
				goto lazy
			}
		}
		// Extend backwards over literals (matches found after a skip).
		for c := ip - dist; ip > anchor && c > 0 && src[ip-1] == src[c-1]; c-- {
			ip--
			ml++
		}
		var ok, full bool
		var end int
		di, end, ok, full = emitSeq(dst, di, src, anchor, ip, dist, ml)
		if !ok {
			return finish(dst, di, src, anchor)
		}
		anchor, ip = end, end
		if full || ip > sn {
			return finish(dst, di, src, anchor)
		}
		ipLimit = min(sn, anchor+maxLiterals(len(dst)-di-seqReserve))
	}
}

package deflate

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

const (
	windowSize = 1 << WindowBits // largest match distance
	minMatch   = 4               // shortest match the encoder looks for
	maxMatch   = 258
	hashBits   = 15
	hashMul    = 0x9E3779B1
)

// levelParams tune the match finder, as zlib's configuration table does.
type levelParams struct {
	chain int // hash chain candidates examined per search
	good  int // a previous match this long quarters the chain
	lazy  int // 0: greedy; else look one byte ahead unless the match is this long
	nice  int // a match this long ends the search
	// insert is the longest match whose positions all enter the hash
	// chains in greedy mode (longer ones skip them, trading ratio for speed).
	insert int
	// skip is how many searches in a row may fail before the parser
	// starts stepping over input (a byte more every 16 further failures,
	// like LZ4), which crosses incompressible data quickly.
	skip int
	// ahead halves the lookahead's chain this many times (libdeflate
	// searches the next position half as deep).
	ahead uint8
	// offsets: the match at the next position wins if it is longer or
	// closer, weighing a byte of length as four doublings of distance;
	// else only if it is longer.
	offsets bool
}

var levels = [LevelMax + 1]levelParams{
	1: {chain: 4, nice: 8, insert: 4, skip: 16},
	2: {chain: 8, nice: 16, insert: 5, skip: 16},
	3: {chain: 32, nice: 32, insert: 6, skip: 32},
	4: {chain: 16, good: 4, lazy: 4, nice: 16, skip: 32},
	5: {chain: 16, good: 8, lazy: 16, nice: 32, skip: 32},
	6: {chain: 24, good: 258, lazy: 64, nice: 64, skip: 32, ahead: 1, offsets: true},
	7: {chain: 128, good: 8, lazy: 32, nice: 128, skip: 64},
	8: {chain: 1024, good: 32, lazy: 128, nice: 258, skip: 128},
	9: {chain: 4096, good: 32, lazy: 258, nice: 258, skip: 256},
}

func hash4(v uint32) uint32 { return v * hashMul >> (32 - hashBits) }

// hashTail is the number of bytes from a position the match finder reads
// at least: positions closer to the end are literals.
const hashTail = minMatch

// matchFinder keeps hash chains over the current call's input. Positions
// are stored plus base; base grows with every call, so entries of earlier
// calls fall below it and read as empty without clearing the tables.
type matchFinder struct {
	head [1 << hashBits]int32
	// prev holds, for each position in the window, the distance back to
	// the previous position with the same hash (0: none in the window);
	// 16-bit deltas keep the chains in half the cache of positions.
	prev [windowSize]uint16
	base int
	next int // base of the next call
	// ahead is head[hash of position aheadAt], read by the search at
	// aheadAt-1 after it inserted its own position, so that the next
	// search finds its first candidate already loaded; inserts clear it.
	ahead   int32
	aheadAt int
}

// begin prepares the tables for a new input of n bytes.
func (m *matchFinder) begin(n int) {
	if m.next < 1 || m.next+n > 1<<31-windowSize-2 {
		clear(m.head[:])
		m.next = 1
	}
	m.base = m.next
	m.next = m.base + n + windowSize + 1
	m.aheadAt = -1
}

// load32 and load64 read little-endian words at p+off without bounds
// checks: every caller shows the word lies inside the slice p starts.
func load32(p *byte, off int) uint32 {
	return binary.LittleEndian.Uint32((*[4]byte)(unsafe.Add(unsafe.Pointer(p), off))[:])
}

func load64(p *byte, off int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(unsafe.Pointer(p), off))[:])
}

// insert adds positions from … to-1 to the hash chains (those that have 4
// bytes of src from them).
func (m *matchFinder) insert(src []byte, from, to int) {
	to = min(to, len(src)-3)
	if from < 0 {
		return
	}
	m.aheadAt = -1
	p := unsafe.SliceData(src)
	base := m.base
	for j := from; j < to; j++ {
		// j ≥ 0 and j+4 ≤ len(src).
		h := hash4(load32(p, j))
		d := j + base - int(m.head[h])
		if d > windowSize {
			d = 0 // an earlier call's position, or too far
		}
		m.prev[j&(windowSize-1)] = uint16(d)
		m.head[h] = int32(j + base)
	}
}

// find adds position i to the hash chains and returns the longest match
// at src[i:] longer than prev, among the first chain candidates, or 0.
// src[i:] must have at least 4 bytes.
func (m *matchFinder) find(src []byte, i, prev, chain, nice int) (length, dist int) {
	if i < 0 || i > len(src)-4 {
		return 0, 0
	}
	p := unsafe.SliceData(src)
	first := load32(p, i)
	h := hash4(first)
	var head int32
	if m.aheadAt == i {
		head = m.ahead
	} else {
		head = m.head[h]
	}
	cand := int(head) - m.base
	m.head[h] = int32(i + m.base)
	if i+1 <= len(src)-4 {
		// Most searches are followed by one at i+1: start its load now.
		m.ahead = m.head[hash4(load32(p, i+1))]
		m.aheadAt = i + 1
	}
	d := i - cand
	if uint(d-1) >= windowSize {
		d = 0 // an earlier call's position, or too far
	}
	m.prev[i&(windowSize-1)] = uint16(d)
	if d == 0 {
		return 0, 0
	}
	cand = i - d
	maxLen := min(maxMatch, len(src)-i)
	nice = min(nice, maxLen)
	best := max(prev, minMatch-1)
	if best >= maxLen {
		return 0, 0
	}
	// Bounds: best < maxLen ≤ len(src)-i throughout, and candidates
	// only decrease from below i and are read only while cand ≥ stop ≥ 0,
	// so the words read at cand, cand+best-3, i and i+best-3 lie in src,
	// whatever the tables hold.
	tail := load32(p, i+best-3)
	stop := max(i-windowSize, 0)
	for cand >= stop && chain > 0 {
		// Candidates must match the 4 bytes ending where the best match
		// so far ends (most fail here), and then the first 4.
		if load32(p, cand+best-3) == tail && load32(p, cand) == first {
			l := 4 + matchLen(p, cand+4, i+4, maxLen-4)
			if l > best {
				best, dist = l, i-cand
				if l >= nice {
					break
				}
				tail = load32(p, i+best-3)
			}
		}
		d := int(m.prev[cand&(windowSize-1)])
		if d == 0 {
			break
		}
		cand -= d
		chain--
	}
	if dist == 0 {
		return 0, 0
	}
	return best, dist
}

// matchLen is the length of the common prefix, at most n, of the bytes at
// p+a and p+b; the caller ensures both ranges of n bytes are in bounds.
func matchLen(p *byte, a, b, n int) int {
	k := 0
	for ; k+8 <= n; k += 8 {
		if x := load64(p, a+k) ^ load64(p, b+k); x != 0 {
			return k + bits.TrailingZeros64(x)>>3
		}
	}
	for ; k < n; k++ {
		if *(*byte)(unsafe.Add(unsafe.Pointer(p), a+k)) != *(*byte)(unsafe.Add(unsafe.Pointer(p), b+k)) {
			break
		}
	}
	return k
}

// step is how far the parser moves after a failed search: 1, and a byte
// more for every 16 failures beyond the level's skip threshold, up to 32.
func (e *Encoder) step() int {
	return 1 + min(max(e.misses-e.p.skip, 0)>>4, 31)
}

// lit appends a literal token.
func (e *Encoder) lit(c byte) {
	e.tokens = append(e.tokens, token(c))
	e.blk.lit[c]++
	e.est += int(e.mLit[c])
	e.tokEnd++
}

// lits appends literal tokens for all of b.
func (e *Encoder) lits(b []byte) {
	ts, est := e.tokens, e.est
	for _, c := range b {
		ts = append(ts, token(c))
		e.blk.lit[c]++
		est += int(e.mLit[c])
	}
	e.tokens, e.est = ts, est
	e.tokEnd += len(b)
}

// match appends a match token.
func (e *Encoder) match(length, dist int) {
	l := length - 3
	d := uint32(dist - 1)
	ds, dx := distSym(d)
	e.tokens = append(e.tokens, token(matchFlag|uint32(l)<<16|d))
	e.blk.lit[257+int(lenSym[l])]++
	e.blk.dist[ds]++
	e.blk.extra += int(lenExtra[l]) + int(dx)
	e.blk.matched += length
	e.blk.matches++
	e.est += int(e.mLen[l]) + int(e.mDist[ds])
	e.tokEnd += length
}

// parse turns input into tokens from e.i on until the estimated block
// size reaches stopEst bits, the block holds maxTokens tokens, or the input
// ends (then e.done is set and every byte is covered by a token).
func (e *Encoder) parse(src []byte, stopEst, maxTokens int) {
	if e.p.lazy == 0 {
		e.parseGreedy(src, stopEst, maxTokens)
	} else {
		e.parseLazy(src, stopEst, maxTokens)
	}
}

func (e *Encoder) parseGreedy(src []byte, stopEst, maxTokens int) {
	m := &e.mf
	p := e.p
	i := e.i
	for e.est < stopEst && len(e.tokens) < maxTokens {
		if i > len(src)-hashTail {
			for ; i < len(src); i++ {
				e.lit(src[i])
			}
			e.done = true
			break
		}
		l, d := m.find(src, i, 0, p.chain, p.nice)
		if l == 0 {
			e.misses++
			end := min(i+e.step(), len(src)-hashTail+1)
			e.lits(src[i:end])
			i = end
			continue
		}
		e.misses = 0
		e.match(l, d)
		if l <= p.insert {
			m.insert(src, i+1, min(i+l, len(src)-hashTail+1))
		}
		i += l
	}
	e.i = i
}

// parseLazy defers each match by a byte when the next position has a
// longer one (zlib's deflate_slow). e.prevLen/e.prevDist hold the match
// found at e.i-1 while e.pending says src[e.i-1] is not yet a token. The
// block's tokens, statistics and estimate live in locals in the loop.
//
// It is long on purpose: the hot loop stays in one function so that the
// compiler keeps its state in registers.
func (e *Encoder) parseLazy(src []byte, stopEst, maxTokens int) {
	m := &e.mf
	p := &e.p
	b := &e.blk
	mLit, mLen, mDist := &e.mLit, &e.mLen, &e.mDist
	i, ts, est, misses := e.i, e.tokens, e.est, e.misses
	pending, prevLen, prevDist := e.pending, e.prevLen, e.prevDist
	last := len(src) - hashTail // the last position that is searched
	for est < stopEst && len(ts) < maxTokens {
		if i > last {
			e.tokens, e.est, e.tokEnd = ts, est, i
			if pending {
				e.tokEnd--
				if prevLen >= minMatch {
					e.match(prevLen, prevDist)
					i += prevLen - 1
				} else {
					e.lit(src[i-1])
				}
				pending = false
			}
			e.lits(src[i:])
			i = len(src)
			ts, est = e.tokens, e.est
			e.done = true
			break
		}
		var l, d int
		better := false // the match at i beats the one at i-1
		if !pending {
			l, d = m.find(src, i, 0, p.chain, p.nice)
		} else if prevLen < p.lazy {
			chain := p.chain >> p.ahead
			if prevLen >= p.good {
				chain = p.chain >> 2
			}
			if !p.offsets {
				l, d = m.find(src, i, prevLen, chain, p.nice)
				better = l > prevLen
			} else {
				// One more byte of length is worth four doublings of
				// the distance (libdeflate's rule): a match as long but
				// much closer wins too.
				l, d = m.find(src, i, prevLen-1, chain, p.nice)
				better = l >= prevLen && l > 0 &&
					4*(l-prevLen)+bits.Len(uint(prevDist))-bits.Len(uint(d)) > 2
				if !better {
					l = 0
				}
			}
		} else {
			m.insert(src, i, i+1)
		}
		if pending && prevLen >= minMatch && !better {
			// The match at i-1 stands.
			end := i - 1 + prevLen
			ln := uint32(prevLen - 3)
			dd := uint32(prevDist - 1)
			ds, dx := distSym(dd)
			ds %= numDist
			ts = append(ts, token(matchFlag|ln<<16|dd))
			ls := lenSym[ln&0xff]
			b.lit[257+int(ls)]++
			b.dist[ds]++
			b.extra += int(lenExtra[ln&0xff]) + int(dx)
			b.matched += prevLen
			b.matches++
			est += int(mLen[ln&0xff]) + int(mDist[ds])
			m.insert(src, i+1, min(end, last+1))
			i = end
			pending, prevLen = false, 0
			misses = 0
			continue
		}
		if l >= minMatch {
			misses = 0
		} else if !pending || prevLen < minMatch {
			misses++
		}
		if pending {
			c := src[i-1]
			ts = append(ts, token(c))
			b.lit[c]++
			est += int(mLit[c])
		}
		if misses > p.skip {
			// Nothing found here nor a byte before: step over input.
			end := min(i+1+min(max(misses-p.skip, 0)>>4, 31), last+1)
			for _, c := range src[i:end] {
				ts = append(ts, token(c))
				b.lit[c]++
				est += int(mLit[c])
			}
			i = end
			pending = false
			continue
		}
		pending, prevLen, prevDist = true, l, d
		i++
	}
	e.i, e.tokens, e.est, e.misses = i, ts, est, misses
	e.tokEnd = i
	if pending {
		e.tokEnd--
	}
	e.pending, e.prevLen, e.prevDist = pending, prevLen, prevDist
}

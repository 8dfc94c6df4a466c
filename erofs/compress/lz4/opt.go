package lz4

import "unsafe"

// The optimal parser of levels 10–12 prices LZ4 sequences exactly in bytes:
// a literal costs one byte plus its share of the length-extension bytes of
// its run, a match costs its token, its offset and its length-extension
// bytes. The token of a sequence is charged to its match, so the cost of a
// literal run does not depend on what follows. Because LZ4 offsets cost the
// same at any distance, the longest match of a position, cut to every
// shorter length, is the only match worth pricing there.
//
// From the first match found, the parser prices every position of a window
// (as long as matches reach further), then walks back from the furthest
// match end to the start and emits that path. A match of at least the
// level's sufficient length, or one that reaches past the window, ends the
// window and is taken as it is.

type optNode struct {
	price  int32 // bytes to reach this position from the window start
	litlen int32 // length of the literal run ending here
	mlen   int32 // length of the match ending here; 0: reached by a literal
	dist   int32 // that match's offset
}

type optSeq struct{ pos, ml, dist int32 }

const maxPrice = 1 << 30

// litStep is the price of one more literal after a run of l literals.
func litStep(l int32) int32 {
	if l >= 14 && (l-14)%255 == 0 {
		return 2 // the run gets a new length byte
	}
	return 1
}

// matchPrice is the price of a match of length l.
func matchPrice(l int) int32 { return int32(1 + 2 + extBytes(l-minMatch)) }

// compressOpt is CompressDestSize with the optimal parser of levels
// 10–12 (above).
//
// It is long on purpose: the hot loop stays in one function so that the
// compiler keeps its state in registers.
func (e *Encoder) compressOpt(dst, src []byte) (int, int) {
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
	nodes := h.nodes
	window := h.window
	di, anchor := 0, 0
	ipLimit := min(sn, maxLiterals(len(dst)-seqReserve))
	ip := 1
	for {
		if ip > ipLimit {
			return finish(dst, di, src, anchor)
		}
		_, ml, dist := h.search(sp, off, ip, ip, ip, matchLimit)
		if ml == 0 {
			ip++
			continue
		}
		// Price the window that starts at ip.
		seqs := h.seqs[:0]
		// The window ends at ip+last; the path may end with literals.
		last := 0
		if ml >= h.sufficient {
			seqs = append(seqs, optSeq{0, int32(ml), int32(dist)})
		} else {
			nodes[0] = optNode{litlen: int32(ip - anchor)}
			// nodes[1:reach+1] are initialized: only as far as the
			// parse reaches, which is seldom the whole window.
			reach := 0
			var tail optSeq
			cur := 0
			for {
				nd := &nodes[cur]
				if ml > 0 {
					if cur+ml > window || ml >= h.sufficient {
						// Take this match as it is and end the window.
						tail = optSeq{int32(cur), int32(ml), int32(dist)}
						last = cur
						break
					}
					for ; reach < cur+ml; reach++ {
						nodes[reach+1].price = maxPrice
					}
					for l := minMatch; l <= ml; l++ {
						p := nd.price + matchPrice(l)
						if q := &nodes[cur+l]; p < q.price {
							*q = optNode{price: p, mlen: int32(l), dist: int32(dist)}
						}
					}
					last = max(last, cur+ml)
				}
				if cur+1 <= window {
					if reach < cur+1 {
						reach = cur + 1
						nodes[reach].price = maxPrice
					}
					p := nd.price + litStep(nd.litlen)
					if q := &nodes[cur+1]; p < q.price {
						*q = optNode{price: p, litlen: nd.litlen + 1}
					}
				}
				cur++
				if cur >= last {
					break
				}
				ml = 0
				if ip+cur <= sn && h.worthSearching(nodes, cur, reach) {
					_, ml, dist = h.search(sp, off, ip+cur, ip+cur, ip+cur, matchLimit)
				}
			}
			// Walk back from last, collecting the matches.
			if tail.ml > 0 {
				seqs = append(seqs, tail)
			}
			for p := last; p > 0; {
				nd := &nodes[p]
				if nd.mlen == 0 {
					p--
					continue
				}
				p -= int(nd.mlen)
				seqs = append(seqs, optSeq{int32(p), nd.mlen, nd.dist})
			}
		}
		// Emit the matches in order.
		for i := len(seqs) - 1; i >= 0; i-- {
			s := seqs[i]
			var ok, full bool
			var end int
			di, end, ok, full = emitSeq(dst, di, src, anchor, ip+int(s.pos), int(s.dist), int(s.ml))
			if !ok {
				return finish(dst, di, src, anchor)
			}
			anchor = end
			if full {
				return finish(dst, di, src, anchor)
			}
		}
		ip = max(anchor, ip+last)
		if anchor > sn {
			return finish(dst, di, src, anchor)
		}
		ipLimit = min(sn, anchor+maxLiterals(len(dst)-di-seqReserve))
	}
}

// worthSearching says whether the parse should look for matches at cur:
// not where the next position is already reached as cheaply as cur (the
// inside of a long match, mostly), nor, at level 12, where also
// cur+minMatch is reached for less than a match from cur would cost. C's
// LZ4HC skips the same positions; searching them all made levels 10–12
// several times slower than C for images of the same size.
func (h *hcState) worthSearching(nodes []optNode, cur, reach int) bool {
	price := func(i int) int32 {
		if i <= reach {
			return nodes[i].price
		}
		return maxPrice
	}
	p := nodes[cur].price
	if price(cur+1) > p {
		return true
	}
	return h.full && price(cur+minMatch) >= p+3
}

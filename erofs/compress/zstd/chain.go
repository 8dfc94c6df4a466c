package zstd

import "math/bits"

// The chain parser (levels 3 and up): every position goes into hash
// chains of 4-byte sequences, each search walks a chain to a depth set by
// the level, and a match gives way to a better one starting one or two
// bytes later (lazy matching), much as zstd's greedy and lazy strategies.

// chainTable is a hash head table and, per position, the previous
// position with the same hash. Entries hold position+gen (see hashTable).
type chainTable struct {
	head []uint32
	prev []uint32
}

func (c *chainTable) init(hashLog, chainLog uint) {
	c.head = make([]uint32, 1<<hashLog)
	c.prev = make([]uint32, 1<<chainLog)
}

const prime4 = 2654435761

// matchGain scores a match: its length, less a little for the bits a far
// offset costs, so that a longer match has to be worth it.
func matchGain(ml, off int) int { return 4*ml - bits.Len(uint(off)) }

// parseChain continues the parse at e.ip up to limit; matches end at or
// before end.
func (e *Encoder) parseChain(src []byte, limit, end int) {
	head, prev := e.chain.head, e.chain.prev
	hmask := uint32(len(head) - 1)
	cmask := len(prev) - 1
	gen := int(e.hash.gen)
	shift := (32 - e.p.hashLog) & 31
	window := min(e.window, len(prev)-1)
	depth := e.p.depth
	lazy := e.p.lazySteps
	stepShift := e.p.stepShift
	ip, anchor := e.ip, e.anchor
	rep0, rep1 := e.frep[0], e.frep[1]
	ilimit := min(limit, end-9)
	seqs, lits := e.seqs, e.lits
	next := max(e.chainNext, ip) // first position not yet in the chains

	// insert adds the positions up to p (exclusive) to the chains.
	insert := func(p int) {
		for ; next < p; next++ {
			h := le32(src, next) * prime4 >> shift & hmask
			prev[next&cmask] = head[h]
			head[h] = uint32(next + gen)
		}
	}
	// find returns the best match at p (length 0: none).
	find := func(p int) (ml, off int) {
		insert(p)
		h := le32(src, p) * prime4 >> shift & hmask
		cand := int(head[h]) - gen
		lim := min(window, p)
		for d := 0; d < depth; d++ {
			o := p - cand
			if uint(o-1) >= uint(lim) {
				break
			}
			if p+ml >= end {
				break // nothing can be longer
			}
			if src[cand+ml] == src[p+ml] && le32(src, cand) == le32(src, p) {
				if l := 4 + matchLen(src, cand+4, p+4, end); l > ml && matchGain(l, o) > matchGain(ml, off) {
					ml, off = l, o
				}
			}
			cand = int(prev[cand&cmask]) - gen
		}
		return ml, off
	}
	for ip < ilimit {
		var start, ml, off int
		// A repeat of the last offset one byte on, as the fast parser.
		if r := ip + 1 - rep0; r >= 0 && le32(src, ip+1) == le32(src, r) {
			start, off = ip+1, rep0
			ml = 4 + matchLen(src, r+4, start+4, end)
		} else {
			ml, off = find(ip)
			start = ip
			if ml < 4 {
				insert(ip + 1) // this position goes in, skipped ones do not
				ip += 1 + (ip-anchor)>>(stepShift&63)
				next = max(next, ip)
				continue
			}
			// Lazy: a better match one or two bytes on wins.
			for s := 1; s <= lazy && ip+s < ilimit; s++ {
				ml2, off2 := find(ip + s)
				if ml2 >= 4 && matchGain(ml2, off2) > matchGain(ml, off)+4*s {
					start, ml, off = ip+s, ml2, off2
				}
			}
		}
		for start > anchor && start > off && src[start-1] == src[start-1-off] {
			start--
			ml++
		}
		lits = append(lits, src[anchor:start]...)
		seqs = append(seqs, seq{litLen: uint32(start - anchor), matchLen: uint32(ml), offVal: uint32(off)})
		if off != rep0 {
			rep0, rep1 = off, rep0
		}
		ip = start + ml
		anchor = ip
		for ip < ilimit && rep1 <= ip && le32(src, ip) == le32(src, ip-rep1) {
			ml = 4 + matchLen(src, ip+4-rep1, ip+4, end)
			seqs = append(seqs, seq{matchLen: uint32(ml), offVal: uint32(rep1)})
			rep0, rep1 = rep1, rep0
			ip += ml
			anchor = ip
		}
	}
	// Positions inside the last match stay out of the chains until the
	// parse resumes: insert catches up from next.
	e.chainNext = min(next, ilimit)
	e.seqs, e.lits = seqs, lits
	e.ip, e.anchor = ip, anchor
	e.frep[0], e.frep[1] = rep0, rep1
	e.parsed = max(e.parsed, min(ip, end))
}

package lzma

import "bytes"

// The fast parser (levels 0–3) decides one symbol at a time from the
// matches at the current position and, when a match is on the table, the
// matches one byte further: the rules of xz's fast mode, which weigh a
// longer length against a much larger distance (changePair) instead of
// pricing symbols.

// changePair reports whether distance big is so much larger than small
// (more than 128 times) that one byte of length does not pay for it.
func changePair(small, big uint32) bool { return big>>7 > small }

// parseFast codes src until it ends or the budget is full and returns the
// bytes consumed.
func (e *Encoder) parseFast() int {
	src := e.src
	cur, nxt := e.ms[0][:], e.ms[1][:]
	nCur := -1 // matches at pos not searched yet
	pos, check := 0, checkFirst
	for pos < len(src) {
		if pos >= check {
			if e.incompressible(pos) {
				break
			}
			check = nextCheck(check)
		}
		if nCur < 0 {
			nCur = e.mf.find(pos, cur)
		}
		back, length, nNext := e.chooseFast(pos, cur, nCur, nxt)
		if !e.emit(pos, back, length) {
			break
		}
		pos += length
		if length > 1 {
			e.mf.skip(pos)
			nCur = -1
		} else {
			cur, nxt = nxt, cur
			nCur = nNext
		}
	}
	return pos
}

// chooseFast returns the symbol to code at pos (back as in emit) and its
// length. nNext is the number of matches it found at pos+1 (into nxt), or
// -1 if it did not look there.
func (e *Encoder) chooseFast(pos int, cur []match, nCur int, nxt []match) (back, length, nNext int) {
	src := e.src
	avail := len(src) - pos
	if avail < 2 {
		return -1, 1, -1
	}
	limit := min(avail, matchLenMax)
	nice := e.lv.nice

	// Repeated distances first: they cost the fewest bits.
	repLen, repIdx := e.repMatch(pos, limit)
	if repLen >= nice {
		return repIdx, repLen, -1
	}

	lenMain, backMain := 0, uint32(0)
	if nCur > 0 {
		lenMain, backMain = cur[nCur-1].length, cur[nCur-1].dist
		if lenMain >= nice {
			return int(backMain) + numReps, lenMain, -1
		}
		// A match one byte shorter at a far smaller distance is cheaper.
		for nCur > 1 && lenMain == cur[nCur-2].length+1 && changePair(cur[nCur-2].dist, backMain) {
			nCur--
			lenMain, backMain = cur[nCur-1].length, cur[nCur-1].dist
		}
		if lenMain == 3 && backMain >= 0x100 {
			// A far 3-byte match costs more than three literals (its
			// distance alone takes 10 bits or more): smaller output
			// on source text at level 1.
			lenMain = 1
		}
	}
	if repLen >= 2 && (repLen+1 >= lenMain ||
		repLen+2 >= lenMain && backMain > 1<<9 ||
		repLen+3 >= lenMain && backMain > 1<<15) {
		return repIdx, repLen, -1
	}
	if lenMain < 2 || avail <= 2 {
		return -1, 1, -1
	}

	// Look one byte ahead: a better match there makes this byte a literal.
	nNext = e.mf.find(pos+1, nxt)
	if nNext > 0 {
		l, d := nxt[nNext-1].length, nxt[nNext-1].dist
		if l >= lenMain && d < backMain ||
			l == lenMain+1 && !changePair(backMain, d) ||
			l > lenMain+1 ||
			l+1 >= lenMain && lenMain >= 3 && changePair(d, backMain) {
			return -1, 1, nNext
		}
	}
	p1 := pos + 1
	n := max(2, lenMain-1)
	for i := range numReps {
		d := int(e.reps[i]) + 1
		if d <= p1 && src[p1] == src[p1-d] && src[p1+1] == src[p1+1-d] && bytes.Equal(src[p1:p1+n], src[p1-d:p1-d+n]) {
			return -1, 1, nNext
		}
	}
	return int(backMain) + numReps, lenMain, nNext
}

// repMatch returns the longest match at a repeated distance, 0 if none
// reaches 2 bytes, and the distance's index. It is a function of its own,
// unrolled, so that it keeps its few values in registers: it runs at every
// position and mostly finds nothing.
//
//go:noinline
func (e *Encoder) repMatch(pos, limit int) (length, idx int) {
	src := e.src
	c := uint16(src[pos]) | uint16(src[pos+1])<<8
	r := e.reps
	m0, m1, m2, m3 := pos-int(r[0])-1, pos-int(r[1])-1, pos-int(r[2])-1, pos-int(r[3])-1
	if m0 >= 0 && uint16(src[m0])|uint16(src[m0+1])<<8 == c {
		length = extend(src, m0, pos, 2, limit)
	}
	if m1 >= 0 && uint16(src[m1])|uint16(src[m1+1])<<8 == c {
		if l := extend(src, m1, pos, 2, limit); l > length {
			length, idx = l, 1
		}
	}
	if m2 >= 0 && uint16(src[m2])|uint16(src[m2+1])<<8 == c {
		if l := extend(src, m2, pos, 2, limit); l > length {
			length, idx = l, 2
		}
	}
	if m3 >= 0 && uint16(src[m3])|uint16(src[m3+1])<<8 == c {
		if l := extend(src, m3, pos, 2, limit); l > length {
			length, idx = l, 3
		}
	}
	return length, idx
}

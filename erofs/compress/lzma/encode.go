package lzma

// Symbol coding: literal, match, repeated match and short rep. Each symbol
// has a twin that only counts the bytes it would emit (sim); the budget check
// runs the twin when the stream is within maxSymbolBytes of the budget.

// maxSymbolBytes bounds the bytes one symbol can add to the stream: at most
// 22 modelled decisions of at most log2(2048/31) ≈ 6.05 bits and 23 direct
// bits (distances below 8 MiB) make 157 bits, 20 shifts.
const maxSymbolBytes = 24

// litProbs returns the literal coder for the byte at pos (lc 3, lp 0: the
// top three bits of the previous byte).
func (e *Encoder) litProbs(pos int) []uint16 {
	var prev uint32
	if pos > 0 {
		prev = uint32(e.src[pos-1])
	}
	off := (prev >> (8 - encLC)) * literalCoderSize
	return e.p.literal[off : off+literalCoderSize : off+literalCoderSize]
}

func (e *Encoder) encLiteral(pos int) {
	ps := uint32(pos) & e.pbMask
	st := e.state
	var match uint32
	if st >= 7 {
		match = uint32(e.src[pos-int(e.reps[0])-1])
	}
	e.rc.literal(&e.p.isMatch[st<<posBitsMax|ps], e.litProbs(pos), uint32(e.src[pos]), st >= 7, match)
	e.state = stateLiteral(st)
}

func (e *Encoder) simLiteral(pos int) int {
	s := sim{rng: e.rc.rng}
	ps := uint32(pos) & e.pbMask
	st := e.state
	s.bit(e.p.isMatch[st<<posBitsMax|ps], 0)
	probs := e.litProbs(pos)
	sym := uint32(e.src[pos]) | 0x100
	if st < 7 {
		for sym < 0x10000 {
			s.bit(probs[sym>>8], (sym>>7)&1)
			sym <<= 1
		}
	} else {
		match := uint32(e.src[pos-int(e.reps[0])-1])
		offs := uint32(0x100)
		for sym < 0x10000 {
			match <<= 1
			mb := match & offs
			b := (sym >> 7) & 1
			s.bit(probs[offs+mb+sym>>8], b)
			sym <<= 1
			offs &^= mb ^ b<<8
		}
	}
	return s.shifts
}

func (e *Encoder) encLen(l *lenProbs, length int, ps uint32) {
	v := uint32(length - matchLenMin)
	switch {
	case v < lenLowSyms:
		e.rc.bit(&l.choice, 0)
		e.rc.tree(l.low[ps<<3:ps<<3+8], v, 3)
	case v < lenLowSyms+lenMidSyms:
		e.rc.bit(&l.choice, 1)
		e.rc.bit(&l.choice2, 0)
		e.rc.tree(l.mid[ps<<3:ps<<3+8], v-lenLowSyms, 3)
	default:
		e.rc.bit(&l.choice, 1)
		e.rc.bit(&l.choice2, 1)
		e.rc.tree(l.high[:], v-lenLowSyms-lenMidSyms, 8)
	}
}

func (s *sim) length(l *lenProbs, length int, ps uint32) {
	v := uint32(length - matchLenMin)
	switch {
	case v < lenLowSyms:
		s.bit(l.choice, 0)
		s.tree(l.low[ps<<3:ps<<3+8], v, 3)
	case v < lenLowSyms+lenMidSyms:
		s.bit(l.choice, 1)
		s.bit(l.choice2, 0)
		s.tree(l.mid[ps<<3:ps<<3+8], v-lenLowSyms, 3)
	default:
		s.bit(l.choice, 1)
		s.bit(l.choice2, 1)
		s.tree(l.high[:], v-lenLowSyms-lenMidSyms, 8)
	}
}

// encMatch codes a match of length bytes at distance dist+1.
func (e *Encoder) encMatch(pos int, dist uint32, length int) {
	ps := uint32(pos) & e.pbMask
	st := e.state
	e.rc.bit(&e.p.isMatch[st<<posBitsMax|ps], 1)
	e.rc.bit(&e.p.isRep[st], 0)
	e.encLen(&e.p.matchLen, length, ps)
	slot := distSlotOf(dist)
	e.rc.tree(e.p.distSlot[distState(length)][:], slot, 6)
	if slot >= distModelStart {
		footer := slot>>1 - 1
		base := (2 | slot&1) << footer
		red := dist - base
		if slot < distModelEnd {
			e.rc.reverseTree(e.p.distSpec[base-slot:], red, footer)
		} else {
			e.rc.direct(red>>alignBits, footer-alignBits)
			e.rc.reverseTree(e.p.align[:], red&(alignSize-1), alignBits)
		}
	}
	e.reps[3], e.reps[2], e.reps[1], e.reps[0] = e.reps[2], e.reps[1], e.reps[0], dist
	e.state = stateMatch(st)
}

func (e *Encoder) simMatch(pos int, dist uint32, length int) int {
	s := sim{rng: e.rc.rng}
	ps := uint32(pos) & e.pbMask
	st := e.state
	s.bit(e.p.isMatch[st<<posBitsMax|ps], 1)
	s.bit(e.p.isRep[st], 0)
	s.length(&e.p.matchLen, length, ps)
	slot := distSlotOf(dist)
	s.tree(e.p.distSlot[distState(length)][:], slot, 6)
	if slot >= distModelStart {
		footer := slot>>1 - 1
		base := (2 | slot&1) << footer
		red := dist - base
		if slot < distModelEnd {
			s.reverseTree(e.p.distSpec[base-slot:], red, footer)
		} else {
			s.direct(footer - alignBits)
			s.reverseTree(e.p.align[:], red&(alignSize-1), alignBits)
		}
	}
	return s.shifts
}

// encRep codes a match at the idx-th most recent distance; idx 0 with
// length 1 is a short rep.
func (e *Encoder) encRep(pos int, idx int, length int) {
	ps := uint32(pos) & e.pbMask
	st := e.state
	e.rc.bit(&e.p.isMatch[st<<posBitsMax|ps], 1)
	e.rc.bit(&e.p.isRep[st], 1)
	if idx == 0 {
		e.rc.bit(&e.p.isRepG0[st], 0)
		if length == 1 {
			e.rc.bit(&e.p.isRep0Long[st<<posBitsMax|ps], 0)
			e.state = stateShortRep(st)
			return
		}
		e.rc.bit(&e.p.isRep0Long[st<<posBitsMax|ps], 1)
	} else {
		e.rc.bit(&e.p.isRepG0[st], 1)
		d := e.reps[idx]
		if idx == 1 {
			e.rc.bit(&e.p.isRepG1[st], 0)
		} else {
			e.rc.bit(&e.p.isRepG1[st], 1)
			e.rc.bit(&e.p.isRepG2[st], uint32(idx-2))
			if idx == 3 {
				e.reps[3] = e.reps[2]
			}
			e.reps[2] = e.reps[1]
		}
		e.reps[1] = e.reps[0]
		e.reps[0] = d
	}
	e.encLen(&e.p.repLen, length, ps)
	e.state = stateRep(st)
}

func (e *Encoder) simRep(pos int, idx int, length int) int {
	s := sim{rng: e.rc.rng}
	ps := uint32(pos) & e.pbMask
	st := e.state
	s.bit(e.p.isMatch[st<<posBitsMax|ps], 1)
	s.bit(e.p.isRep[st], 1)
	if idx == 0 {
		s.bit(e.p.isRepG0[st], 0)
		if length == 1 {
			s.bit(e.p.isRep0Long[st<<posBitsMax|ps], 0)
			return s.shifts
		}
		s.bit(e.p.isRep0Long[st<<posBitsMax|ps], 1)
	} else {
		s.bit(e.p.isRepG0[st], 1)
		if idx == 1 {
			s.bit(e.p.isRepG1[st], 0)
		} else {
			s.bit(e.p.isRepG1[st], 1)
			s.bit(e.p.isRepG2[st], uint32(idx-2))
		}
	}
	s.length(&e.p.repLen, length, ps)
	return s.shifts
}

// emit codes one symbol if the stream still fits the budget after it
// (flushed), and reports whether it did. back is the symbol as the parsers
// give it: -1 literal, 0–3 rep index, 4+ match distance+4 (dist = back-4).
func (e *Encoder) emit(pos int, back int, length int) bool {
	if e.rc.size()+maxSymbolBytes > e.budget {
		var n int
		switch {
		case back < 0:
			n = e.simLiteral(pos)
		case back < numReps:
			n = e.simRep(pos, back, length)
		default:
			n = e.simMatch(pos, uint32(back-numReps), length)
		}
		if e.rc.size()+n > e.budget {
			return false
		}
	}
	switch {
	case back < 0:
		e.encLiteral(pos)
	case back < numReps:
		e.encRep(pos, back, length)
	default:
		e.encMatch(pos, uint32(back-numReps), length)
	}
	return true
}

package lzma

import "math/bits"

// The LZMA1 model: adaptive binary probabilities (11-bit, shift 5), the 12
// states of the literal/match history, four repeated distances, and the
// length, distance-slot and literal coders. Encoder and decoder share it, so
// the two cannot drift apart.

const (
	probBits  = 11
	probOne   = 1 << probBits
	probInit  = probOne / 2
	moveBits  = 5
	rangeTop  = 1 << 24
	numStates = 12

	posBitsMax  = 4
	posStates   = 1 << posBitsMax
	matchLenMin = 2
	matchLenMax = 273

	lenLowSyms  = 8
	lenMidSyms  = 8
	lenHighSyms = 256

	distStates     = 4 // distance slots are coded in the context of min(len-2, 3)
	distSlots      = 64
	distModelStart = 4
	distModelEnd   = 14
	fullDistances  = 1 << (distModelEnd / 2)
	alignBits      = 4
	alignSize      = 1 << alignBits

	literalCoderSize = 0x300
	literalCodersMax = 16 // lc + lp ≤ 4
)

// The properties the encoder writes: lc 3, lp 0, pb 2, the LZMA default
// (props byte 0x5D, MicroLZMA first byte 0xA2).
const (
	encLC    = 3
	encLP    = 0
	encPB    = 2
	encProps = (encPB*5+encLP)*9 + encLC
)

// State transitions. States 0–6 follow a literal, 7–11 a match.
func stateLiteral(s uint32) uint32 {
	switch {
	case s < 4:
		return 0
	case s < 10:
		return s - 3
	}
	return s - 6
}

func stateMatch(s uint32) uint32 {
	if s < 7 {
		return 7
	}
	return 10
}

func stateRep(s uint32) uint32 {
	if s < 7 {
		return 8
	}
	return 11
}

func stateShortRep(s uint32) uint32 {
	if s < 7 {
		return 9
	}
	return 11
}

// lenProbs is one length coder: lengths 2–9 (low), 10–17 (mid, both per
// position state: index posState<<3 | symbol), 18–273 (high).
type lenProbs struct {
	choice  uint16
	choice2 uint16
	low     [posStates << 3]uint16
	mid     [posStates << 3]uint16
	high    [lenHighSyms]uint16
}

// probs holds every adaptive probability of one stream. Tables indexed by
// state and position state are flat: state<<posBitsMax | posState.
type probs struct {
	isMatch    [numStates << posBitsMax]uint16
	isRep      [numStates]uint16
	isRepG0    [numStates]uint16
	isRepG1    [numStates]uint16
	isRepG2    [numStates]uint16
	isRep0Long [numStates << posBitsMax]uint16
	distSlot   [distStates][distSlots]uint16
	// distSpec is one longer than the format's table: a slot's reverse
	// tree starts at base-slot, so its node 1 is at base-slot+1.
	distSpec [fullDistances - distModelEnd + 1]uint16
	align    [alignSize]uint16
	matchLen lenProbs
	repLen   lenProbs
	literal  [literalCodersMax * literalCoderSize]uint16
}

// reset sets every probability to one half; only the first nLit literal
// coders are touched (a stream uses 1<<(lc+lp) of them).
func (p *probs) reset(nLit int) {
	fill(p.isMatch[:])
	fill(p.isRep[:])
	fill(p.isRepG0[:])
	fill(p.isRepG1[:])
	fill(p.isRepG2[:])
	fill(p.isRep0Long[:])
	for i := range p.distSlot {
		fill(p.distSlot[i][:])
	}
	fill(p.distSpec[:])
	fill(p.align[:])
	p.matchLen.reset()
	p.repLen.reset()
	fill(p.literal[:nLit*literalCoderSize])
}

func (l *lenProbs) reset() {
	l.choice, l.choice2 = probInit, probInit
	fill(l.low[:])
	fill(l.mid[:])
	fill(l.high[:])
}

// fill sets every probability of s to one half, by doubling copies: every
// stream resets some 14,000 of them, and on incompressible input (stopped
// after 1 KiB) the reset is a tenth of the work.
func fill(s []uint16) {
	if len(s) == 0 {
		return
	}
	s[0] = probInit
	for i := 1; i < len(s); i *= 2 {
		copy(s[i:], s[:i])
	}
}

// distState is the distance-slot context of a match length.
func distState(length int) int {
	if length < distStates+matchLenMin {
		return length - matchLenMin
	}
	return distStates - 1
}

// distSlot returns the slot of a distance (distance-1 as coded).
func distSlotOf(dist uint32) uint32 {
	if dist < distModelStart {
		return dist
	}
	n := uint32(bits.Len32(dist)) - 1
	return n<<1 | (dist>>(n-1))&1
}

package lzma

import "math"

// Prices are coding costs in 1/16 bit, estimated from the adaptive model:
// a decision of probability p costs -log2(p) bits.

const (
	priceShift = 4 // prices are in 1/16 bit
	infinity   = 1 << 30
)

// bitPrices[p>>4] is the price of a decision whose probability is p/2048.
var bitPrices = func() (t [probOne >> moveReduce]uint32) {
	for i := range t {
		p := (float64(i<<moveReduce) + float64(1<<moveReduce)/2) / probOne
		t[i] = uint32(math.Round(-math.Log2(p) * (1 << priceShift)))
	}
	return
}()

const moveReduce = 4

func bitPrice(p uint16, b uint32) uint32 {
	if b == 0 {
		return bitPrices[p>>moveReduce]
	}
	return bitPrices[(probOne-uint32(p))>>moveReduce]
}

func treePrice(probs []uint16, v, n uint32) uint32 {
	var price uint32
	m := uint32(1)
	for n > 0 {
		n--
		b := (v >> n) & 1
		price += bitPrice(probs[m], b)
		m = m<<1 | b
	}
	return price
}

func reverseTreePrice(probs []uint16, v, n uint32) uint32 {
	var price uint32
	m := uint32(1)
	for ; n > 0; n-- {
		b := v & 1
		v >>= 1
		price += bitPrice(probs[m], b)
		m = m<<1 | b
	}
	return price
}

func literalPrice(probs []uint16, c uint32, matched bool, match uint32) uint32 {
	var price uint32
	sym := c | 0x100
	if !matched {
		for sym < 0x10000 {
			price += bitPrice(probs[sym>>8], (sym>>7)&1)
			sym <<= 1
		}
		return price
	}
	offs := uint32(0x100)
	for sym < 0x10000 {
		match <<= 1
		mb := match & offs
		b := (sym >> 7) & 1
		price += bitPrice(probs[offs+mb+sym>>8], b)
		sym <<= 1
		offs &^= mb ^ b<<8
	}
	return price
}

// prices are the tables the optimal parser reads many times per position;
// they are refreshed from the model every refreshEvery bytes coded, since
// the model drifts slowly.
type prices struct {
	matchLen [1 << encPB][matchLenMax - matchLenMin + 1]uint32
	repLen   [1 << encPB][matchLenMax - matchLenMin + 1]uint32
	slot     [distStates][distSlots]uint32 // slot tree, plus direct bits
	small    [distStates][fullDistances]uint32
	align    [alignSize]uint32
}

const refreshEvery = 2048

func (t *prices) lenPrices(out *[1 << encPB][matchLenMax - matchLenMin + 1]uint32, l *lenProbs) {
	c0, c1 := bitPrice(l.choice, 0), bitPrice(l.choice, 1)
	m0, m1 := c1+bitPrice(l.choice2, 0), c1+bitPrice(l.choice2, 1)
	var high [lenHighSyms]uint32
	for v := range uint32(lenHighSyms) {
		high[v] = m1 + treePrice(l.high[:], v, 8)
	}
	for ps := range uint32(1 << encPB) {
		row := &out[ps]
		for v := range uint32(lenLowSyms) {
			row[v] = c0 + treePrice(l.low[ps<<3:ps<<3+8], v, 3)
			row[lenLowSyms+v] = m0 + treePrice(l.mid[ps<<3:ps<<3+8], v, 3)
		}
		copy(row[lenLowSyms+lenMidSyms:], high[:])
	}
}

func (t *prices) refresh(p *probs) {
	t.lenPrices(&t.matchLen, &p.matchLen)
	t.lenPrices(&t.repLen, &p.repLen)
	for ds := range distStates {
		for slot := range uint32(distSlots) {
			price := treePrice(p.distSlot[ds][:], slot, 6)
			if slot >= distModelEnd {
				price += (slot>>1 - 1 - alignBits) << priceShift
			}
			t.slot[ds][slot] = price
		}
		for dist := range uint32(fullDistances) {
			slot := distSlotOf(dist)
			price := t.slot[ds][slot]
			if slot >= distModelStart {
				footer := slot>>1 - 1
				base := (2 | slot&1) << footer
				price += reverseTreePrice(p.distSpec[base-slot:], dist-base, footer)
			}
			t.small[ds][dist] = price
		}
	}
	for v := range uint32(alignSize) {
		t.align[v] = reverseTreePrice(p.align[:], v, alignBits)
	}
}

// distPrice is the price of distance dist+1 for a match of length.
func (t *prices) distPrice(dist uint32, length int) uint32 {
	ds := distState(length)
	if dist < fullDistances {
		return t.small[ds][dist]
	}
	return t.slot[ds][distSlotOf(dist)] + t.align[dist&(alignSize-1)]
}

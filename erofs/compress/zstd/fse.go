package zstd

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// FSE (tANS) tables of the sequences section, RFC 8878 §4.1. The encoder
// normalizes a histogram to a power-of-two total, writes it as a table
// description and encodes symbols backwards, so that the decoder, reading
// the bit stream from its end, meets the first sequence first.

const (
	maxLLCode = 35
	maxMLCode = 52
	maxOFCode = 31

	maxLLLog  = 9
	maxMLLog  = 9
	maxOFLog  = 8
	minFSELog = 5
)

// The predefined distributions (RFC 8878 §3.1.1.3.2.2); -1 marks a
// "less than 1" probability, which takes one slot.
var (
	predefLL = [...]int16{4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
		2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1}
	predefML = [...]int16{1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1}
	predefOF = [...]int16{1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1}
)

// Table modes of the Symbol_Compression_Modes byte.
const (
	modePredefined = 0
	modeRLE        = 1
	modeFSE        = 2
)

// symbolTransform is the per-symbol encoding rule: with state s in
// [tableSize, 2*tableSize), (s+deltaNbBits)>>16 low bits of s go out and
// the next state is stateTable[(s>>nbBits)+deltaFindState].
type symbolTransform struct {
	deltaNbBits    uint32
	deltaFindState int32
}

// fseTable is one stream's encoding table.
type fseTable struct {
	tableLog   uint8
	norm       *[64]int16          // predefined tables only
	symbolTT   [64]symbolTransform // 64: a code masked with 63 needs no bounds check
	stateTable [1 << maxMLLog]uint16
	spread     [1 << maxMLLog]uint8
}

// build makes the encoding table from a normalized distribution whose
// positive entries and -1s sum to 1<<tableLog.
func (t *fseTable) build(norm []int16, tableLog uint8) {
	size := 1 << tableLog
	mask := size - 1
	var cumul [maxMLCode + 2]int
	high := size - 1
	for s, n := range norm {
		if n == -1 {
			cumul[s+1] = cumul[s] + 1
			t.spread[high] = uint8(s)
			high--
		} else {
			cumul[s+1] = cumul[s] + int(n)
		}
	}
	// Spread the symbols over the table with the format's fixed step, so
	// the decoder, doing the same, sees the same layout.
	step := size>>1 + size>>3 + 3
	pos := 0
	const m = 1<<maxMLLog - 1 // indexes masked: no bounds checks
	if high == size-1 {
		// No "less than 1" symbols (every table of our own): no slots
		// at the end to step over.
		for s, n := range norm {
			for range n {
				t.spread[pos&m] = uint8(s)
				pos = (pos + step) & mask
			}
		}
	} else {
		for s, n := range norm {
			for range max(n, 0) {
				t.spread[pos&m] = uint8(s)
				pos = (pos + step) & mask
				for pos > high {
					pos = (pos + step) & mask
				}
			}
		}
	}
	// stateTable lists, per symbol, its states in increasing order.
	var next [maxMLCode + 1]uint16
	for s := range norm {
		next[s] = uint16(cumul[s])
	}
	for u := range size {
		s := t.spread[u&m]
		t.stateTable[next[s]&m] = uint16(size + u)
		next[s]++
	}
	for s, n := range norm {
		switch {
		case n == 0:
			// Unused; an encode of s would be a bug (the deltas give
			// garbage, not a crash: stateTable indexes stay in range).
			t.symbolTT[s] = symbolTransform{deltaNbBits: uint32(tableLog+1)<<16 - uint32(size), deltaFindState: 0}
		case n == -1 || n == 1:
			t.symbolTT[s] = symbolTransform{
				deltaNbBits:    uint32(tableLog)<<16 - uint32(size),
				deltaFindState: int32(cumul[s] - 1),
			}
		default:
			maxBits := uint32(tableLog) - uint32(bits.Len16(uint16(n-1))-1)
			minStatePlus := uint32(n) << maxBits
			t.symbolTT[s] = symbolTransform{
				deltaNbBits:    maxBits<<16 - minStatePlus,
				deltaFindState: int32(cumul[s] - int(n)),
			}
		}
	}
	t.tableLog = tableLog
	if t.norm != nil {
		// The predefined tables' distributions price them (cost).
		copy(t.norm[:], norm)
	}
}

// initState is the encoder state for the last symbol of the stream: no
// bits are written for it, the decoder's initial state read at the end
// stands for it.
func (t *fseTable) initState(s uint8) uint32 {
	tt := t.symbolTT[s]
	nb := (tt.deltaNbBits + 1<<15) >> 16
	v := nb<<16 - tt.deltaNbBits
	return uint32(t.stateTable[int32(v>>nb)+tt.deltaFindState])
}

// normalize scales a histogram of total n to 1<<tableLog. A symbol
// rarer than one slot's worth gets the "less than 1" probability (-1,
// one slot, the cheapest to describe); the others get the floor of their
// share, rounded up when that saves more bits than the slot costs the
// most frequent symbol, which takes what is left. The result is valid
// for any histogram with at least two and at most 1<<tableLog present
// symbols.
func normalize(norm []int16, hist []uint32, n int, tableLog uint8) {
	size := 1 << tableLog
	low := uint32(n >> tableLog)
	const fb = 20                     // fraction bits of the scaled counts
	step := uint64(1<<62) / uint64(n) // c*step < 2^62 for any count c <= n
	shift := (62 - fb - uint(tableLog)) & 63
	left := size
	largest := -1
	for s, c := range hist {
		if c == 0 {
			norm[s] = 0
			continue
		}
		if c <= low {
			norm[s] = -1
			left--
			continue
		}
		v := uint64(c) * step >> shift // share in 1/2^fb slots
		p := v >> fb
		if p < uint64(len(roundUp)) && v&(1<<fb-1) > uint64(roundUp[p]) {
			p++
		}
		norm[s] = int16(p)
		left -= int(p)
		if largest < 0 || c > hist[largest] {
			largest = s
		}
	}
	if largest >= 0 && int(norm[largest])+left > int(norm[largest])/2 {
		norm[largest] += int16(left)
		return
	}
	normalizeNearest(norm, hist, n, tableLog)
}

// roundUp[p] is the fraction (in 1/2^20) of a slot above p at which p+1
// slots cost fewer bits: the symbol's count c, at p+f slots' worth,
// saves c·log2(1+1/p) bits; the slot taken from the most frequent
// symbol costs it about n/size/ln 2. Equal when f = 1/ln(1+1/p) − p,
// which tends to one half.
var roundUp [64]uint32

func init() {
	for p := 1; p < len(roundUp); p++ {
		roundUp[p] = uint32((1/math.Log1p(1/float64(p)) - float64(p)) * (1 << 20))
	}
}

// normalizeNearest is normalize's fallback for histograms whose rare
// symbols need more slots than the most frequent can give up: shares
// rounded to nearest, at least one slot each, the excess taken back from
// the largest entries one at a time.
func normalizeNearest(norm []int16, hist []uint32, n int, tableLog uint8) {
	size := 1 << tableLog
	sum := 0
	largest := 0
	for s, c := range hist {
		if c == 0 {
			norm[s] = 0
			continue
		}
		v := int((uint64(c)<<tableLog + uint64(n)/2) / uint64(n))
		v = max(v, 1)
		norm[s] = int16(v)
		sum += v
		if c > hist[largest] {
			largest = s
		}
	}
	if sum <= size {
		norm[largest] += int16(size - sum)
		return
	}
	for sum > size {
		best := -1
		for s, v := range norm {
			if v > 1 && (best < 0 || v > norm[best]) {
				best = s
			}
		}
		norm[best]--
		sum--
	}
}

// optimalLog picks a table size for n symbols of which present differ.
func optimalLog(n, present int, maxLog uint8) uint8 {
	l := uint8(bits.Len(uint(n))) - 2 // about four symbols per slot…
	l = min(l, maxLog)
	need := uint8(bits.Len(uint(present))) + 1 // …but room for every symbol
	l = max(l, need, minFSELog)
	return min(l, maxLog)
}

// bitAppender appends bits to a byte slice, first bits lowest, a word
// at a time.
type bitAppender struct {
	acc uint64
	nb  uint
	dst []byte
}

// put appends the n (at most 32) low bits of v.
func (w *bitAppender) put(v uint64, n uint) {
	w.acc |= v << (w.nb & 63)
	w.nb += n
	if w.nb >= 32 {
		w.dst = binary.LittleEndian.AppendUint32(w.dst, uint32(w.acc))
		w.acc >>= 32
		w.nb -= 32
	}
}

// flush appends the bits left, the last byte zero-padded.
func (w *bitAppender) flush() []byte {
	for ; w.nb > 0; w.nb -= min(w.nb, 8) {
		w.dst = append(w.dst, byte(w.acc))
		w.acc >>= 8
	}
	return w.dst
}

// writeNorm appends the table description (FSE_Compressed_Mode) of norm.
func writeNorm(dst []byte, norm []int16, tableLog uint8) []byte {
	w := bitAppender{dst: dst}
	put := w.put
	put(uint64(tableLog-minFSELog), 4)
	remaining := 1<<tableLog + 1
	threshold := 1 << tableLog
	nbBits := uint(tableLog) + 1
	prevZero := false
	s := 0
	for remaining > 1 && s < len(norm) {
		if prevZero {
			start := s
			for norm[s] == 0 {
				s++
			}
			run := s - start
			for run >= 3 {
				put(3, 2)
				run -= 3
			}
			put(uint64(run), 2)
		}
		count := int(norm[s])
		s++
		value := count + 1
		maxv := 2*threshold - 1 - remaining
		if value >= threshold {
			value += maxv
		}
		if value < maxv {
			put(uint64(value), nbBits-1)
		} else {
			put(uint64(value), nbBits)
		}
		remaining -= max(count, -count) // -1 takes one slot
		prevZero = count == 0
		for remaining < threshold {
			nbBits--
			threshold >>= 1
		}
	}
	return w.flush()
}

// log2x16 is 16*log2(i) rounded, for cost estimates in 1/16 bits.
var log2x16 [1<<maxMLLog + 1]uint16

func init() {
	for i := 1; i < len(log2x16); i++ {
		log2x16[i] = uint16(math.Round(16 * math.Log2(float64(i))))
	}
}

// cost is the estimated size, in 1/16 bits, of coding hist with norm at
// tableLog, or -1 when norm cannot code a present symbol.
func cost(hist []uint32, norm []int16, tableLog uint8) int {
	total := 0
	for s, c := range hist {
		if c == 0 {
			continue
		}
		if s >= len(norm) || norm[s] == 0 {
			return -1
		}
		n := max(int(norm[s]), 1)
		total += int(c) * (16*int(tableLog) - int(log2x16[n]))
	}
	return total
}

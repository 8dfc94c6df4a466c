package deflate

import (
	"math/bits"

	"github.com/ocierofs/ocierofs/erofs/compress/internal/huff"
)

// Symbol alphabets of RFC 1951 §3.2.5–3.2.7.
const (
	numLitLen  = 286 // literals 0–255, end of block 256, lengths 257–285
	numDist    = 30
	numCodeLen = 19
	endOfBlock = 256
	maxBits    = 15 // longest literal/length and distance code
	maxCLBits  = 7  // longest code-length code
)

// Length and distance tables: the symbol of every length and distance, and
// the extra bits each symbol carries.
var (
	lenSym    [256]uint8 // by length-3: literal/length symbol - 257
	lenExtra  [256]uint8 // by length-3: extra bits
	lenBase   [29]uint16 // by symbol-257: smallest length - 3
	distExtra [numDist]uint8
	distBase  [numDist]uint16 // smallest distance - 1
	// clOrder is the order in which code-length code lengths are sent.
	clOrder = [numCodeLen]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
	// fixedLitLen and fixedDist are the lengths of the fixed code (BTYPE 01).
	fixedLitLen [288]uint8
	fixedLit    [288]uint16 // bit-reversed codes
	fixedDist   [32]uint16
)

func init() {
	for l := range 256 {
		var s, x int
		switch {
		case l < 8:
			s = l
		case l == 255:
			s = 28
		default:
			n := bits.Len(uint(l)) - 1
			s, x = 4*(n-1)+(l>>(n-2))&3, n-2
		}
		lenSym[l], lenExtra[l] = uint8(s), uint8(x)
		if l == 0 || lenSym[l-1] != uint8(s) {
			lenBase[s] = uint16(l)
		}
	}
	for c := range numDist {
		x := 0
		if c >= 4 {
			x = c/2 - 1
		}
		distExtra[c] = uint8(x)
		if c < 4 {
			distBase[c] = uint16(c)
		} else {
			distBase[c] = uint16((2 | c&1) << x)
		}
	}
	for i := range 288 {
		switch {
		case i < 144:
			fixedLitLen[i] = 8
		case i < 256:
			fixedLitLen[i] = 9
		case i < 280:
			fixedLitLen[i] = 7
		default:
			fixedLitLen[i] = 8
		}
	}
	canonical(fixedLit[:], fixedLitLen[:])
	var fd [32]uint8
	for i := range fd {
		fd[i] = 5
	}
	canonical(fixedDist[:], fd[:])
	m := &fixedModel
	copy(m.lit[:], fixedLitLen[:])
	for l := range m.len {
		m.len[l] = fixedLitLen[257+int(lenSym[l])] + lenExtra[l]
	}
	for s := range m.dist {
		m.dist[s] = 5 + distExtra[s]
	}
}

// fixedModel is the growth model of a new block (Encoder.newBlock): the
// fixed code's lengths.
var fixedModel struct {
	lit  [numLitLen]uint8
	len  [256]uint8
	dist [numDist]uint8
}

// distSym returns the distance symbol and its extra bits for distance d+1.
func distSym(d uint32) (sym, extra uint32) {
	if d < 4 {
		return d, 0
	}
	n := uint32(bits.Len32(d)) - 1
	return 2*n + (d>>(n-1))&1, n - 1
}

// canonical assigns the canonical Huffman codes of RFC 1951 §3.2.2 to the
// code lengths, bit-reversed because DEFLATE sends codes from their most
// significant bit into a least-significant-first bit stream.
func canonical(codes []uint16, lengths []uint8) {
	var count [maxBits + 1]uint16
	for _, l := range lengths {
		count[l]++
	}
	count[0] = 0
	var next [maxBits + 1]uint16
	code := uint16(0)
	for l := 1; l <= maxBits; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	for s, l := range lengths {
		if l != 0 {
			codes[s] = bits.Reverse16(next[l]) >> (16 - l)
			next[l]++
		}
	}
}

// huffman computes length-limited Huffman code lengths for freq into
// lengths (same size). Symbols of zero frequency get length 0, except that
// at least two symbols always get a code (zlib does the same), so every
// code is complete — the kernel's inflate rejects incomplete codes. sorted
// is scratch space.
type huffman struct {
	sorted []uint64
	tmp    []uint64
	depth  []uint32
}

func (h *huffman) build(freq []uint32, lengths []uint8, limit int) {
	h.sorted = h.sorted[:0]
	for s, f := range freq {
		lengths[s] = 0
		if f != 0 {
			h.sorted = append(h.sorted, uint64(f)<<16|uint64(s))
		}
	}
	// Two codes at least: take the lowest unused symbols.
	for s := 0; len(h.sorted) < 2; s++ {
		if freq[s] == 0 {
			h.sorted = append(h.sorted, uint64(s))
		}
	}
	h.sort()
	n := len(h.sorted)
	if cap(h.depth) < n {
		h.depth = make([]uint32, n, 2*n)
	}
	a := h.depth[:n]
	for i, v := range h.sorted {
		a[i] = uint32(v >> 16)
	}
	huff.Lengths(a)
	// a[i] is now the length of the i-th lightest symbol; a[0] is the
	// longest. Limit the lengths by moving leaves up the tree, keeping
	// the code complete (the adjustment of JPEG, ITU T.81 Annex K.3).
	if int(a[0]) > limit {
		var count [320]int
		for _, d := range a {
			count[d]++
		}
		for i := int(a[0]); i > limit; i-- {
			for count[i] > 0 {
				j := i - 2
				for count[j] == 0 {
					j--
				}
				count[i] -= 2
				count[i-1]++
				count[j+1] += 2
				count[j]--
			}
		}
		k := 0
		for l := limit; l > 0; l-- {
			for range count[l] {
				a[k] = uint32(l)
				k++
			}
		}
	}
	for i, v := range h.sorted {
		lengths[v&0xffff] = uint8(a[i])
	}
}

// sort orders h.sorted (frequency<<16 | symbol, symbols ascending) by
// frequency, then symbol: insertion sort for few symbols, else a stable
// radix sort on the frequency's bytes (as many as its largest value has),
// which costs a few passes instead of n log n comparisons.
func (h *huffman) sort() {
	a := h.sorted
	if len(a) <= 32 {
		for i := 1; i < len(a); i++ {
			v := a[i]
			j := i
			for ; j > 0 && a[j-1] > v; j-- {
				a[j] = a[j-1]
			}
			a[j] = v
		}
		return
	}
	var top uint64
	for _, v := range a {
		top |= v
	}
	top >>= 16
	if cap(h.tmp) < len(a) {
		h.tmp = make([]uint64, len(a), cap(a))
	}
	b := h.tmp[:len(a)]
	for shift := uint(16); top != 0; shift, top = shift+8, top>>8 {
		var count [256]int
		for _, v := range a {
			count[byte(v>>shift)]++
		}
		sum := 0
		for k, c := range count {
			count[k] = sum
			sum += c
		}
		for _, v := range a {
			k := byte(v >> shift)
			b[count[k]] = v
			count[k]++
		}
		a, b = b, a
	}
	if &a[0] != &h.sorted[0] {
		copy(h.sorted, a)
	}
}

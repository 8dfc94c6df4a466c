package zstd

import (
	"encoding/binary"
	"math/bits"

	"github.com/ocierofs/ocierofs/erofs/compress/internal/huff"
)

// The literals' Huffman coder (RFC 8878 §4.2). A block's literals are at
// most a few KiB in a 4 KiB pcluster, where a generic builder spends more
// time sorting and allocating than coding; this one sorts the (at most
// 256) counts into buckets by magnitude, computes code lengths in place
// (Moffat and Katajainen's method on the sorted counts), limits them to
// 11 bits and writes the weights FSE-compressed or 4 bits each, whichever
// is shorter.

const (
	huffMaxBits = 11 // the format's longest code
	huffWtLog   = 6  // largest FSE table of the weights
)

// huffEnc holds one block's Huffman table and the scratch to build it.
type huffEnc struct {
	count   [256]uint32
	enc     [256]uint32 // code<<8 | length, 0 for absent symbols
	maxBits uint8
	desc    []byte // the tree description

	sorted  [256]uint32 // count<<8 | symbol, by increasing count
	lens    [256]uint32
	lens2   [256]uint32
	weights [256]uint8
	wt      fseTable
	wtNorm  [huffMaxBits + 1]int16
}

// build makes the table of the byte counts in h.count, of which n is the
// total. It reports false when no table is worth writing: one symbol
// (RLE), or so even a spread that Huffman cannot pay for its table.
func (h *huffEnc) build(n int) bool {
	// Bucket the present symbols by the bit length of their counts, then
	// sort each (small) bucket by insertion: the counts of a few KiB of
	// literals spread over a dozen buckets.
	clear(h.enc[:])
	var bucket [33]uint16
	keys := h.lens[:] // scratch until the lengths are computed
	present, maxCount := 0, uint32(0)
	for s, c := range h.count {
		if c != 0 {
			keys[present&255] = c<<8 | uint32(s)
			bucket[bits.Len32(c)]++
			present++
			maxCount = max(maxCount, c)
		}
	}
	if present < 2 || int(maxCount) <= n>>7+4 {
		return false
	}
	var start [34]uint16
	for i := 1; i < len(start); i++ {
		start[i] = start[i-1] + bucket[i-1]
	}
	for _, k := range keys[:present] {
		b := bits.Len32(k >> 8)
		h.sorted[start[b]&255] = k
		start[b]++
	}
	a := h.sorted[:present]
	for i := 1; i < len(a); i++ {
		v := a[i]
		j := i
		for ; j > 0 && a[j-1] > v; j-- {
			a[j] = a[j-1]
		}
		a[j] = v
	}

	// Code lengths in place: the counts, pairwise merged into a tree whose
	// internal nodes reuse the slots; then depths.
	l := h.lens[:present]
	for i, v := range a {
		l[i] = v >> 8
	}
	huff.Lengths(l)
	if l[0] > huffMaxBits {
		limitLengths(l, huffMaxBits)
	}
	// Few literals pay for their table more than for their codes: codes
	// capped shorter than optimal make fewer distinct weights, whose
	// description compresses better. Both are tried when they differ.
	capBits := uint32(max(bits.Len(uint(n-1))-2, bits.Len(uint(present-1))+1, 5))
	if l[0] <= capBits {
		return h.assign(a, l)
	}
	l2 := h.lens2[:present]
	copy(l2, l)
	limitLengths(l2, capBits)
	last := int(a[0] & 255)
	for _, v := range a {
		last = max(last, int(v&255))
	}
	if h.lengthsCost(l2, last) < h.lengthsCost(l, last) {
		l = l2
	}
	return h.assign(a, l)
}

// lengthsCost estimates, in 1/16 bits, the literals coded with lengths l
// of the sorted symbols and their description: the weights' entropy and
// a few bits per distinct weight for the table that codes them.
func (h *huffEnc) lengthsCost(l []uint32, last int) int {
	var perLen [huffMaxBits + 1]uint32
	data := 0
	for i, v := range h.sorted[:len(l)] {
		data += int(v>>8) * int(l[i])
		perLen[l[i]&15]++
	}
	n := uint32(last + 1)
	zeros := n - uint32(len(l))
	ln := log16(n)
	desc := 0
	if zeros > 0 {
		desc += int(zeros) * (ln - log16(zeros))
	}
	for _, c := range perLen {
		if c > 0 {
			desc += int(c)*(ln-log16(c)) + 6*16
		}
	}
	return data*16 + desc
}

// assign sets the weights, the canonical codes and the description of
// the code lengths l of the sorted symbols a; false when no description
// can be written.
func (h *huffEnc) assign(a, l []uint32) bool {
	maxBits := l[0]
	for _, v := range l {
		maxBits = max(maxBits, v)
	}
	h.maxBits = uint8(maxBits)

	// Weights, and the canonical codes of the decoder's table: weight-1
	// symbols first, in symbol order within a weight.
	var perW [huffMaxBits + 2]uint32
	last := 0
	for i, v := range a {
		s := v & 255
		w := maxBits + 1 - l[i]
		h.enc[s] = w // weight, for now
		perW[w]++
		last = max(last, int(s))
	}
	var next [huffMaxBits + 2]uint32
	pos := uint32(0)
	for w := 1; w <= int(maxBits); w++ {
		next[w] = pos
		pos += perW[w] << (w - 1)
	}
	for s := 0; s <= last; s++ {
		w := h.enc[s] & 255
		h.weights[s] = uint8(w)
		if w == 0 {
			continue
		}
		w &= 15
		code := next[w] >> (w - 1)
		next[w] += 1 << (w - 1)
		h.enc[s] = code<<8 | (maxBits + 1 - w)
	}
	return h.writeWeights(last)
}

// limitLengths caps lengths (l[0] the longest, decreasing along l) at
// limit and restores a complete code: first lengthening the least
// frequent short codes until the Kraft sum fits, then shortening the most
// frequent codes where there is room.
func limitLengths(l []uint32, limit uint32) {
	one := 1 << limit
	kraft := 0
	for i := range l {
		l[i] = min(l[i], limit)
		kraft += one >> l[i]
	}
	for i := 0; kraft > one; {
		if l[i] >= limit {
			i++
			continue
		}
		kraft -= one >> (l[i] + 1)
		l[i]++
	}
	for i := len(l) - 1; kraft < one; i-- {
		if i < 0 {
			i = len(l) - 1
		}
		if l[i] > 1 && kraft+one>>l[i] <= one {
			kraft += one >> l[i]
			l[i]--
		}
	}
}

// writeWeights writes the tree description of weights[:last] into desc
// (the last symbol's weight is implied): FSE-compressed when that is
// shorter, else four bits a weight. It reports false when neither
// applies (more than 128 weights that FSE cannot compress).
func (h *huffEnc) writeWeights(last int) bool {
	h.desc = h.desc[:0]
	direct := 1 + (last+1)/2
	if last > 128 {
		direct = 1 << 20
	}
	wts := h.weights[:last]
	if d := h.compressWeights(wts); len(d) > 1 && len(d) < direct && len(d) < 128 {
		return true
	}
	if last > 128 {
		return false
	}
	h.desc = append(h.desc[:0], byte(127+last))
	for i := 0; i < last; i += 2 {
		v := wts[i] << 4
		if i+1 < last {
			v |= wts[i+1]
		}
		h.desc = append(h.desc, v)
	}
	return true
}

// compressWeights writes the FSE form of the weights into h.desc (its
// first byte the size) and returns it, or an empty slice when FSE does
// not apply.
func (h *huffEnc) compressWeights(wts []uint8) []byte {
	n := len(wts)
	if n < 2 {
		return nil
	}
	var hist [huffMaxBits + 1]uint32
	for _, w := range wts {
		hist[w&15]++
	}
	top, distinct := 0, 0
	for w, c := range hist {
		if c != 0 {
			top = w
			distinct++
		}
	}
	if distinct < 2 {
		return nil
	}
	log := optimalLog(n, distinct, huffWtLog)
	norm := h.wtNorm[:top+1]
	normalize(norm, hist[:top+1], n, log)
	h.desc = append(h.desc[:0], 0)
	h.desc = writeNorm(h.desc, norm, log)
	t := &h.wt
	t.build(norm, log)

	// Two interleaved states over the weights, last to first, as the
	// decoder reads them first to last alternating from state 1.
	w := bitAppender{dst: h.desc}
	enc := func(st *uint32, s uint8) {
		tt := &t.symbolTT[s&63]
		k := (*st + tt.deltaNbBits) >> 16
		w.put(uint64(*st&(1<<(k&31)-1)), uint(k))
		*st = uint32(t.stateTable[(*st>>(k&31)+uint32(tt.deltaFindState))&(1<<maxMLLog-1)])
	}
	i := n
	var s1, s2 uint32
	if n&1 != 0 {
		s1 = t.initState(wts[i-1])
		s2 = t.initState(wts[i-2])
		enc(&s1, wts[i-3])
		i -= 3
	} else {
		s2 = t.initState(wts[i-1])
		s1 = t.initState(wts[i-2])
		i -= 2
	}
	for i > 0 {
		enc(&s2, wts[i-1])
		enc(&s1, wts[i-2])
		i -= 2
	}
	w.put(uint64(s2&(1<<log-1)), uint(log))
	w.put(uint64(s1&(1<<log-1)), uint(log))
	w.put(1, 1) // end mark
	out := w.flush()
	h.desc = out
	if len(out)-1 >= 128 {
		return nil
	}
	out[0] = byte(len(out) - 1)
	return out
}

// bitsOf is the coded length in bits of hist under the table, or -1 when
// a counted symbol has no code.
func (h *huffEnc) bitsOf(hist *[256]uint32) int {
	total := 0
	for s, c := range hist {
		if c == 0 {
			continue
		}
		e := h.enc[s]
		if e == 0 {
			return -1
		}
		total += int(c) * int(e&255)
	}
	return total
}

// appendStream appends the Huffman stream of lits: symbols last to
// first, so that the decoder, reading from the end, meets the first
// first; four codes of at most 11 bits go in between flushes.
func (h *huffEnc) appendStream(out []byte, lits []byte) []byte {
	need := len(out) + len(lits)*int(h.maxBits)/8 + 16
	if cap(out) < need {
		out = append(make([]byte, 0, need+need/4), out...)
	}
	buf := out[:cap(out)]
	o := len(out)
	tab := &h.enc
	var acc uint64
	var nb uint
	i := len(lits)
	for ; i&3 != 0; i-- {
		e := tab[lits[i-1]]
		acc |= uint64(e>>8) << (nb & 63)
		nb += uint(e & 255)
	}
	binary.LittleEndian.PutUint64(buf[o:], acc)
	o += int(nb >> 3)
	acc >>= (nb >> 3 << 3) & 63
	nb &= 7
	for ; i > 0; i -= 4 {
		q := lits[i-4 : i]
		e := tab[q[3]]
		acc |= uint64(e>>8) << (nb & 63)
		nb += uint(e & 255)
		e = tab[q[2]]
		acc |= uint64(e>>8) << (nb & 63)
		nb += uint(e & 255)
		e = tab[q[1]]
		acc |= uint64(e>>8) << (nb & 63)
		nb += uint(e & 255)
		e = tab[q[0]]
		acc |= uint64(e>>8) << (nb & 63)
		nb += uint(e & 255)
		binary.LittleEndian.PutUint64(buf[o:], acc)
		o += int(nb >> 3)
		acc >>= (nb >> 3 << 3) & 63
		nb &= 7
	}
	acc |= 1 << (nb & 63) // end mark
	nb++
	binary.LittleEndian.PutUint64(buf[o:], acc)
	o += int((nb + 7) >> 3)
	return buf[:o]
}

// appendHuffLiterals appends the table and the streams of lits, whose
// byte counts the table was built from; four streams unless single.
func (h *huffEnc) appendHuffLiterals(out []byte, lits []byte, single bool) []byte {
	out = append(out, h.desc...)
	if single {
		return h.appendStream(out, lits)
	}
	seg := (len(lits) + 3) / 4
	jt := len(out)
	out = append(out, 0, 0, 0, 0, 0, 0)
	for k := range 4 {
		b := len(out)
		out = h.appendStream(out, lits[min(k*seg, len(lits)):min((k+1)*seg, len(lits))])
		if k < 3 {
			binary.LittleEndian.PutUint16(out[jt+2*k:], uint16(len(out)-b))
		}
	}
	return out
}

package zstd

import (
	"encoding/binary"
	"math/bits"
)

// A seq is one parsed sequence: litLen literals, then a match of matchLen
// bytes whose distance is coded as offVal (a repeat-offset index or the
// distance+3) by reps.code, which keeps the history the decoder keeps.
// 16 bytes: the parser writes one per 20 bytes of text.
type seq struct {
	litLen, matchLen, offVal uint32
	llc, mlc, ofc            uint8
}

// Literal and match length codes (RFC 8878 §3.1.1.3.2.1.1): baselines
// and extra bits per code.
var (
	// Padded to 64 entries: codes masked with 63 index them unchecked.
	llBase = [64]uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096,
		8192, 16384, 32768, 65536}
	llBits = [64]uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	mlBase = [64]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
		19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34,
		35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
		4099, 8195, 16387, 32771, 65539}
	mlBits = [64]uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11,
		12, 13, 14, 15, 16}

	llCodeSmall [64]uint8  // litLen < 64
	mlCodeSmall [128]uint8 // matchLen-3 < 128
)

func init() {
	for c := maxLLCode; c >= 0; c-- {
		for v := llBase[c]; v < 64 && v < llBase[c]+1<<llBits[c]; v++ {
			llCodeSmall[v] = uint8(c)
		}
	}
	for c := maxMLCode; c >= 0; c-- {
		for v := mlBase[c] - 3; v < 128 && v < mlBase[c]-3+1<<mlBits[c]; v++ {
			mlCodeSmall[v] = uint8(c)
		}
	}
}

func llCode(ll uint32) uint8 {
	if ll < 64 {
		return llCodeSmall[ll]
	}
	return uint8(bits.Len32(ll)) - 1 + 19
}

func mlCode(ml uint32) uint8 {
	if m := ml - 3; m < 128 {
		return mlCodeSmall[m]
	}
	return uint8(bits.Len32(ml-3)) - 1 + 36
}

// reps is the repeat-offset history of the decoder.
type reps [3]uint32

var initialReps = reps{1, 4, 8}

// replay moves history r over seqs as the decoder does, from their
// offset values.
func replay(seqs []seq, r reps) reps {
	for i := range seqs {
		v, ll0 := seqs[i].offVal, seqs[i].litLen == 0
		if v > 3 {
			r[0], r[1], r[2] = v-3, r[0], r[1]
			continue
		}
		if ll0 {
			v++
		}
		switch v {
		case 1:
		case 2:
			r[0], r[1] = r[1], r[0]
		case 3:
			r[0], r[1], r[2] = r[2], r[0], r[1]
		default: // 4: repeat offset 1 less one
			r[0], r[1], r[2] = r[0]-1, r[0], r[1]
		}
	}
	return r
}

// codeHist counts the codes of a block's sequences.
type codeHist struct {
	ll, ml, of [64]uint32
}

// code turns the match distances the parsers leave in offVal into offset
// values (RFC 8878 §3.1.2.5), fills in the codes, counts them in h and
// moves the history on.
func (r *reps) code(seqs []seq, h *codeHist) {
	r0, r1, r2 := r[0], r[1], r[2]
	for i := range seqs {
		s := &seqs[i]
		o := s.offVal
		v := o + 3
		if s.litLen > 0 {
			switch o {
			case r0:
				v = 1
			case r1:
				v = 2
				r0, r1 = o, r0
			case r2:
				v = 3
				r0, r1, r2 = o, r0, r1
			default:
				r0, r1, r2 = o, r0, r1
			}
		} else {
			switch o {
			case r1:
				v = 1
				r0, r1 = o, r0
			case r2:
				v = 2
				r0, r1, r2 = o, r0, r1
			case r0 - 1:
				v = 3
				r0, r1, r2 = o, r0, r1
			default:
				r0, r1, r2 = o, r0, r1
			}
		}
		s.offVal = v
		ofc := uint8(bits.Len32(v)) - 1
		llc, mlc := llCode(s.litLen), mlCode(s.matchLen)
		s.ofc, s.llc, s.mlc = ofc, llc, mlc
		h.ll[llc&63]++
		h.ml[mlc&63]++
		h.of[ofc&63]++
	}
	r[0], r[1], r[2] = r0, r1, r2
}

var predefLLTable, predefMLTable, predefOFTable fseTable

func init() {
	predefLLTable.norm = new([64]int16)
	predefMLTable.norm = new([64]int16)
	predefOFTable.norm = new([64]int16)
	predefLLTable.build(predefLL[:], 6)
	predefMLTable.build(predefML[:], 6)
	predefOFTable.build(predefOF[:], 5)
}

// seqCoder holds the tables of one sequences section.
type seqCoder struct {
	tables [3]fseTable
	norm   [maxMLCode + 1]int16
	desc   [3][]byte
}

// choose picks the cheapest mode for one stream: RLE for a single symbol,
// else the predefined table or a table of its own with its description,
// by estimated bits. It returns the table to encode with.
func (c *seqCoder) choose(i int, hist []uint32, n int, maxLog uint8, predef *fseTable, predefLog uint8) (*fseTable, uint8) {
	present, last := 0, 0
	for s, h := range hist {
		if h != 0 {
			present++
			last = s
		}
	}
	t := &c.tables[i]
	c.desc[i] = c.desc[i][:0]
	if present == 1 {
		var norm [1 << 6]int16
		norm[last] = 1
		t.build(norm[:last+1], 0)
		c.desc[i] = append(c.desc[i], byte(last))
		return t, modeRLE
	}
	pc := cost(hist[:last+1], predef.norm[:], predefLog)
	log := optimalLog(n, present, maxLog)
	normalize(c.norm[:last+1], hist[:last+1], n, log)
	fc := cost(hist[:last+1], c.norm[:last+1], log)
	c.desc[i] = writeNorm(c.desc[i], c.norm[:last+1], log)
	fc += len(c.desc[i]) * 8 * 16
	if pc >= 0 && pc <= fc {
		c.desc[i] = c.desc[i][:0]
		return predef, modePredefined
	}
	t.build(c.norm[:last+1], log)
	return t, modeFSE
}

// writeSequences appends the sequences section of seqs (coded), whose
// codes h counts.
func (c *seqCoder) writeSequences(out []byte, seqs []seq, h *codeHist) []byte {
	n := len(seqs)
	switch {
	case n < 128:
		out = append(out, byte(n))
	case n < 0x7f00:
		out = append(out, byte(n>>8)+128, byte(n))
	default:
		out = append(out, 255, byte(n-0x7f00), byte((n-0x7f00)>>8))
	}
	if n == 0 {
		return out
	}
	llT, llM := c.choose(0, h.ll[:maxLLCode+1], n, maxLLLog, &predefLLTable, 6)
	ofT, ofM := c.choose(1, h.of[:maxOFCode+1], n, maxOFLog, &predefOFTable, 5)
	mlT, mlM := c.choose(2, h.ml[:maxMLCode+1], n, maxMLLog, &predefMLTable, 6)
	out = append(out, llM<<6|ofM<<4|mlM<<2)
	out = append(out, c.desc[0]...)
	out = append(out, c.desc[1]...)
	out = append(out, c.desc[2]...)

	return appendSeqBits(out, seqs, llT, mlT, ofT)
}

// appendSeqBits writes the bit stream of seqs: sequences last to first,
// each as its three state transitions then its extra bits, so that the
// decoder reads them in order. The accumulator stays in registers and is
// flushed a whole word at a time (at most 7+26 bits before the extra
// bits, 7+16+16+20 after). Indexes are masked to their tables' sizes
// (which they never exceed) instead of checked.
func appendSeqBits(out []byte, seqs []seq, llT, mlT, ofT *fseTable) []byte {
	n := len(seqs)
	need := len(out) + n*10 + 24
	if cap(out) < need {
		out = append(make([]byte, 0, need+need/4), out...)
	}
	buf := out[:cap(out)]
	o := len(out)
	var acc uint64
	var nb uint
	last := &seqs[n-1]
	llS := llT.initState(last.llc)
	mlS := mlT.initState(last.mlc)
	ofS := ofT.initState(last.ofc)
	acc = extraBits(last)
	nb = uint(llBits[last.llc&63] + mlBits[last.mlc&63] + last.ofc)
	binary.LittleEndian.PutUint64(buf[o:], acc)
	o += int(nb >> 3)
	acc >>= (nb >> 3 << 3) & 63
	nb &= 7
	const stMask = 1<<maxMLLog - 1
	for i := n - 2; i >= 0; i-- {
		s := &seqs[i]
		tt := &ofT.symbolTT[s.ofc&63]
		k := (ofS + tt.deltaNbBits) >> 16
		acc |= uint64(ofS&(1<<(k&31)-1)) << (nb & 63)
		nb += uint(k)
		ofS = uint32(ofT.stateTable[(ofS>>(k&31)+uint32(tt.deltaFindState))&stMask])
		tt = &mlT.symbolTT[s.mlc&63]
		k = (mlS + tt.deltaNbBits) >> 16
		acc |= uint64(mlS&(1<<(k&31)-1)) << (nb & 63)
		nb += uint(k)
		mlS = uint32(mlT.stateTable[(mlS>>(k&31)+uint32(tt.deltaFindState))&stMask])
		tt = &llT.symbolTT[s.llc&63]
		k = (llS + tt.deltaNbBits) >> 16
		acc |= uint64(llS&(1<<(k&31)-1)) << (nb & 63)
		nb += uint(k)
		llS = uint32(llT.stateTable[(llS>>(k&31)+uint32(tt.deltaFindState))&stMask])
		binary.LittleEndian.PutUint64(buf[o:], acc)
		o += int(nb >> 3)
		acc >>= (nb >> 3 << 3) & 63
		nb &= 7
		acc |= extraBits(s) << (nb & 63)
		nb += uint(llBits[s.llc&63] + mlBits[s.mlc&63] + s.ofc)
		binary.LittleEndian.PutUint64(buf[o:], acc)
		o += int(nb >> 3)
		acc >>= (nb >> 3 << 3) & 63
		nb &= 7
	}
	acc |= uint64(mlS&(1<<mlT.tableLog-1)) << (nb & 63)
	nb += uint(mlT.tableLog)
	acc |= uint64(ofS&(1<<ofT.tableLog-1)) << (nb & 63)
	nb += uint(ofT.tableLog)
	binary.LittleEndian.PutUint64(buf[o:], acc)
	o += int(nb >> 3)
	acc >>= (nb >> 3 << 3) & 63
	nb &= 7
	acc |= uint64(llS&(1<<llT.tableLog-1)) << (nb & 63)
	nb += uint(llT.tableLog)
	acc |= 1 << (nb & 63) // end mark
	nb++
	binary.LittleEndian.PutUint64(buf[o:], acc)
	o += int((nb + 7) >> 3)
	return buf[:o]
}

// extraBits is the extra bits of s, literal length lowest, then match
// length, then offset: at most 16+16+20 bits.
func extraBits(s *seq) uint64 {
	ll, ml := s.llc&63, s.mlc&63
	v := uint64(s.litLen - llBase[ll])
	v |= uint64(s.matchLen-mlBase[ml]) << (llBits[ll] & 63)
	v |= uint64(s.offVal-1<<(s.ofc&31)) << ((llBits[ll] + mlBits[ml]) & 63)
	return v
}

// Literals_Section types.
const (
	litRaw        = 0
	litRLE        = 1
	litCompressed = 2
)

// writeLiterals appends the literals section: Huffman-coded (one stream
// below 1 KiB, four above) when that is smaller, else raw or RLE.
func writeLiterals(out []byte, lits []byte, h *huffEnc) []byte {
	n := len(lits)
	if n >= 32 {
		h.count = [256]uint32{}
		countBytes(&h.count, lits)
		if int(h.count[lits[0]]) == n {
			out = appendRawHeader(out, litRLE, n)
			return append(out, lits[0])
		}
		if h.build(n) {
			single := n < 1024
			at := len(out)
			// Room for the longest header, moved down once the size is known.
			out = append(out, 0, 0, 0, 0, 0)
			out = h.appendHuffLiterals(out, lits, single)
			c := len(out) - at - 5
			hdr := 3
			switch {
			case max(n, c) >= 16384:
				hdr = 5
			case max(n, c) >= 1024:
				hdr = 4
			}
			if c+hdr < n+rawHeaderLen(n) && c < 1<<18 {
				var v uint64
				switch {
				case single:
					v = uint64(litCompressed) | uint64(n)<<4 | uint64(c)<<14
				case hdr == 3:
					v = uint64(litCompressed) | 1<<2 | uint64(n)<<4 | uint64(c)<<14
				case hdr == 4:
					v = uint64(litCompressed) | 2<<2 | uint64(n)<<4 | uint64(c)<<18
				default:
					v = uint64(litCompressed) | 3<<2 | uint64(n)<<4 | uint64(c)<<22
				}
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], v)
				copy(out[at:], b[:hdr])
				copy(out[at+hdr:], out[at+5:])
				return out[:len(out)-(5-hdr)]
			}
			out = out[:at]
		}
	}
	out = appendRawHeader(out, litRaw, n)
	return append(out, lits...)
}

func rawHeaderLen(n int) int {
	switch {
	case n < 32:
		return 1
	case n < 4096:
		return 2
	}
	return 3
}

func appendRawHeader(out []byte, typ byte, n int) []byte {
	switch {
	case n < 32:
		return append(out, typ|byte(n)<<3)
	case n < 4096:
		return append(out, typ|1<<2|byte(n&15)<<4, byte(n>>4))
	}
	return append(out, typ|3<<2|byte(n&15)<<4, byte(n>>4), byte(n>>12))
}

package lz4

// Decompress decodes the raw LZ4 block src into dst and returns the number of
// bytes written. Every read and write is bounds-checked: a malformed block
// gives ErrCorrupt, a block that decodes to more than len(dst) bytes gives
// ErrShortDst. The block must end with a literals-only sequence; the encoder
// rules on the last 5 and 12 bytes are not enforced.
func Decompress(dst, src []byte) (int, error) { return decode(dst, src, false) }

// DecompressPartial decodes src until dst is full and stops there without
// error, even if the block goes on, like LZ4_decompress_safe_partial. It
// returns the number of bytes written: len(dst), or less if the block ends
// first. Only the part of the block needed to fill dst is read and checked.
func DecompressPartial(dst, src []byte) (int, error) { return decode(dst, src, true) }

// decode is Decompress and, if partial, DecompressPartial.
//
// It is long on purpose: the decode loop stays in one function so that
// the compiler keeps its state in registers.
func decode(dst, src []byte, partial bool) (int, error) {
	if len(src) == 0 {
		return 0, ErrCorrupt
	}
	si, di := 0, 0
	for {
		if partial && di == len(dst) {
			return di, nil
		}
		tok := src[si]
		si++
		// Fast path: a short sequence with room to spare on both sides.
		// The literals are copied as 16 bytes, a match of up to 18 bytes
		// that does not overlap its copy as 18 bytes.
		if lits := int(tok >> 4); lits < 15 && si+16+2 <= len(src) && di+32 <= len(dst) {
			copy(dst[di:di+16], src[si:si+16])
			di += lits
			si += lits
			offset := int(src[si]) | int(src[si+1])<<8
			si += 2
			ml := int(tok & 15)
			if ml < 15 && offset >= 18 && offset <= di {
				s := di - offset
				copy(dst[di:di+18], dst[s:s+18])
				di += ml + minMatch
				if si >= len(src) {
					return di, ErrCorrupt
				}
				continue
			}
			if offset == 0 || offset > di {
				return di, ErrCorrupt
			}
			var err error
			if ml == 15 {
				if ml, si, err = readExt(src, si, ml); err != nil {
					return di, err
				}
			}
			ml += minMatch
			if di, err = copyMatch(dst, di, offset, ml, partial); err != nil || di == len(dst) && partial {
				return di, err
			}
			if si >= len(src) {
				return di, ErrCorrupt
			}
			continue
		}
		lits := int(tok >> 4)
		if lits == 15 {
			var err error
			if lits, si, err = readExt(src, si, lits); err != nil {
				return di, err
			}
		}
		if lits > 0 {
			n := lits
			if partial && n > len(dst)-di {
				n = len(dst) - di
			}
			if n > len(src)-si {
				return di, ErrCorrupt
			}
			if n > len(dst)-di {
				return di, ErrShortDst
			}
			copy(dst[di:di+n], src[si:si+n])
			di += n
			si += n
			if n < lits {
				return di, nil
			}
		}
		if si == len(src) {
			return di, nil // the last sequence: literals only
		}
		if partial && di == len(dst) {
			return di, nil
		}
		if si+2 > len(src) {
			return di, ErrCorrupt
		}
		offset := int(src[si]) | int(src[si+1])<<8
		si += 2
		if offset == 0 || offset > di {
			return di, ErrCorrupt
		}
		ml := int(tok & 15)
		if ml == 15 {
			var err error
			if ml, si, err = readExt(src, si, ml); err != nil {
				return di, err
			}
		}
		ml += minMatch
		var err error
		if di, err = copyMatch(dst, di, offset, ml, partial); err != nil || di == len(dst) && partial {
			return di, err
		}
		if si >= len(src) {
			return di, ErrCorrupt // a block cannot end with a match
		}
	}
}

// readExt adds the length-extension bytes at src[si:] to v.
func readExt(src []byte, si, v int) (int, int, error) {
	for {
		if si >= len(src) {
			return v, si, ErrCorrupt
		}
		b := src[si]
		si++
		v += int(b)
		if b != 255 {
			return v, si, nil
		}
	}
}

// copyMatch appends ml bytes from offset bytes back, which may overlap the
// bytes being written. In partial mode a match that does not fit is cut at
// the end of dst.
func copyMatch(dst []byte, di, offset, ml int, partial bool) (int, error) {
	if ml > len(dst)-di {
		if !partial {
			return di, ErrShortDst
		}
		ml = len(dst) - di
	}
	s := di - offset
	if offset >= ml {
		copy(dst[di:di+ml], dst[s:s+ml])
		return di + ml, nil
	}
	// Overlapping: the bytes from s repeat with period offset. Copying the
	// whole written part of the pattern doubles it each time.
	end := di + ml
	for di < end {
		di += copy(dst[di:end], dst[s:di])
	}
	return di, nil
}
